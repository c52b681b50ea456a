// The installed exporter links and collects (install_check.sh runs it where it was installed).
#include <percpu/prometheus_collector.h>

int main() {
  percpu::counter<long> c;
  c.add(2);
  percpu::prometheus_collector col;
  col.add_counter("install_check_total", "help", {}, c);
  const auto families = col.Collect();
  return families.size() == 1 && families[0].metric[0].counter.value == 2 ? 0 : 1;
}
