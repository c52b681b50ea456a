// Statistics of an A/B comparison of run times (the context-switch check): mean, standard
// deviation, and whether the difference of two means stands out of the noise.
#pragma once

#include <algorithm>
#include <cmath>
#include <string>
#include <vector>

namespace percpu::cli {

/// The median of `v` (the mean of the middle two for an even count); 0 for none. Units are the
/// samples'.
inline double median(std::vector<double> v) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  const std::size_t n = v.size();
  return n % 2 == 1 ? v[n / 2] : (v[n / 2 - 1] + v[n / 2]) / 2;
}

/// Mean and sample standard deviation (n - 1 in the denominator) of `v`; sd is 0 for fewer than
/// two samples, both are 0 for none. Units are those of the samples (seconds here).
struct mean_sd {
  double mean = 0;
  double sd = 0;
  std::size_t n = 0;
};

inline mean_sd describe_samples(const std::vector<double>& v) {
  mean_sd r;
  r.n = v.size();
  if (v.empty()) return r;
  for (double x : v) r.mean += x;
  r.mean /= static_cast<double>(v.size());
  if (v.size() < 2) return r;
  double ss = 0;
  for (double x : v) ss += (x - r.mean) * (x - r.mean);
  r.sd = std::sqrt(ss / static_cast<double>(v.size() - 1));
  return r;
}

/// The 97.5% quantile of Student's t distribution with `df` degrees of freedom (two-sided 95%),
/// from the standard table; 1.96 in the limit.
inline double t_quantile_975(double df) {
  static const double table[] = {12.706, 4.303, 3.182, 2.776, 2.571, 2.447, 2.365, 2.306,
                                 2.262,  2.228, 2.201, 2.179, 2.160, 2.145, 2.131, 2.120,
                                 2.110,  2.101, 2.093, 2.086, 2.080, 2.074, 2.069, 2.064,
                                 2.060,  2.056, 2.052, 2.048, 2.045, 2.042};
  if (!(df >= 1)) return table[0];
  if (df <= 30) return table[static_cast<int>(df) - 1];  // round down: the wider band
  return 1.96 + (2.042 - 1.96) * 30 / df;
}

/// B against A: the difference of the means in percent of A's mean, and the noise band around
/// it: the half-width of the difference's 95% confidence interval by Welch's t test (standard
/// error sqrt(sdA²/nA + sdB²/nB), Welch-Satterthwaite degrees of freedom), also in percent of
/// A's mean. A difference inside the band is "within the noise": these runs cannot tell A and B
/// apart. (Of many comparisons with no real difference, about 1 in 20 still lands outside.)
struct ab_difference {
  double percent = 0;        ///< 100 * (mean B - mean A) / mean A; positive: B is slower
  double noise_percent = 0;  ///< 100 * t * standard error of the difference / mean A
  bool enough_runs = false;  ///< both sides have at least 3 runs
  bool within_noise() const { return std::fabs(percent) <= noise_percent; }
  /// "within the noise", "slower (beyond the noise)", "faster (beyond the noise)", or "too few
  /// runs to tell".
  std::string verdict() const {
    if (!enough_runs) return "too few runs to tell";
    if (within_noise()) return "within the noise";
    return percent > 0 ? "slower (beyond the noise)" : "faster (beyond the noise)";
  }
};

inline ab_difference compare_means(const mean_sd& a, const mean_sd& b) {
  ab_difference d;
  if (a.n == 0 || b.n == 0 || a.mean <= 0) return d;
  d.percent = 100 * (b.mean - a.mean) / a.mean;
  d.enough_runs = a.n >= 3 && b.n >= 3;
  if (a.n < 2 || b.n < 2) return d;
  const double va = a.sd * a.sd / static_cast<double>(a.n);
  const double vb = b.sd * b.sd / static_cast<double>(b.n);
  const double se = std::sqrt(va + vb);
  const double df_den =
      va * va / static_cast<double>(a.n - 1) + vb * vb / static_cast<double>(b.n - 1);
  const double df =
      df_den > 0 ? (va + vb) * (va + vb) / df_den : static_cast<double>(a.n + b.n - 2);
  d.noise_percent = 100 * t_quantile_975(df) * se / a.mean;
  return d;
}

/// The verdict over several registration-only comparisons: how many stand out of the noise,
/// in which direction, against the about 1 in 20 expected by chance.
struct ab_verdict {
  int compared = 0;
  int undecided = 0;  ///< too few runs (fewer than 3 on a side, or none: failed runs)
  int slower = 0;     ///< beyond the noise, B slower
  int faster = 0;     ///< beyond the noise, B faster
  void add(const ab_difference& d) {
    ++compared;
    if (!d.enough_runs) {
      ++undecided;
      return;
    }
    if (d.within_noise()) return;
    (d.percent > 0 ? slower : faster) += 1;
  }
  /// Comparisons beyond the noise that chance alone would give: 1 in 20, rounded up.
  int expected_by_chance() const { return (compared + 19) / 20; }
  /// True when the runs show a cost: more comparisons slower beyond the noise than chance
  /// gives, and none faster.
  bool measurable_cost() const { return slower > (compared - undecided + 19) / 20 && faster == 0; }
  std::string text() const;
};

inline std::string ab_verdict::text() const {
  if (compared == 0 || undecided == compared)
    return "too few runs to tell (each comparison needs at least 3 runs of each side)";
  if (undecided > 0) {
    ab_verdict decided = *this;
    decided.compared -= undecided;
    decided.undecided = 0;
    return std::to_string(undecided) + " of " + std::to_string(compared) +
           " comparisons had too few runs to tell; of the others, " + decided.text();
  }
  const int beyond = slower + faster;
  const std::string counts = std::to_string(beyond) + " of " + std::to_string(compared);
  if (beyond == 0)
    return "all " + std::to_string(compared) +
           " differences that isolate the registration are within the noise: registering an "
           "rseq area costs nothing these runs can measure";
  if (beyond <= expected_by_chance())
    return counts +
           " differences that isolate the registration stand out of the noise, as "
           "many as chance gives at this band (1 in 20): no measurable cost";
  if (slower > 0 && faster > 0)
    return counts + " differences stand out of the noise, in both directions (" +
           std::to_string(slower) + " slower, " + std::to_string(faster) +
           " faster): drift of the machine between runs, not a cost of registration; more "
           "--repetitions narrow the band";
  if (faster > 0)
    return counts +
           " differences stand out of the noise, all faster with registration: "
           "drift of the machine, not a saving; more --repetitions narrow the band";
  return counts +
         " differences stand out of the noise, all slower with registration: a "
         "measurable cost on this machine";
}

}  // namespace percpu::cli
