#!/usr/bin/env bash
# Downloads Debian packages of another suite (bookworm, trixie, sid, ...) and architecture into a
# folder, without installing them and without touching this machine's apt state: a sources file
# and package lists of its own under the cache folder. The archive's URI comes from this
# machine's apt sources (the first main archive they name), so no host name is written here.
#
# Usage: scripts/debian-fetch.sh CACHE SUITE ARCH PACKAGE...
#   CACHE    a folder for the private apt state (CACHE/apt) and the .deb files (CACHE/debs)
#   PACKAGE  a binary package name, or "kernel:FLAVOUR" (cloud-amd64, arm64, ...): the package
#            that holds the suite's current kernel image (vmlinuz) of that flavour
# Prints the path of each .deb, one a line, in the order asked. A package already in CACHE/debs
# is not downloaded again; the lists are refreshed once a day.
set -euo pipefail
[ $# -ge 4 ] || { echo "usage: $0 CACHE SUITE ARCH PACKAGE..." >&2; exit 2; }
cache=$1 suite=$2 arch=$3
shift 3
# Names only: they become file names and apt/awk patterns below.
for name in "$suite" "$arch" "$@"; do
  [[ $name =~ ^(kernel:)?[a-z0-9][a-z0-9.+-]*$ ]] || { echo "debian-fetch: not a Debian name: '$name'" >&2; exit 2; }
done
mkdir -p "$cache" && cache=$(cd "$cache" && pwd) # apt reads relative paths from /etc/apt

# The archive URI: Debian's main archive among this machine's apt sources, so that a third-party
# repository (Docker's, say) or the security archive is never taken for it. A source qualifies
# when it is enabled, of type deb, has the component main, and a URI that is not a security
# archive; one naming this machine's own suite (VERSION_CODENAME) first, then any. deb822
# sources (*.sources) before the one-line format (deb [options] URI suite components...).
archive_uri() {
  local codename want f uri
  codename=$(. /etc/os-release 2>/dev/null && echo "${VERSION_CODENAME:-}") || codename=
  for want in "$codename" ""; do
    for f in /etc/apt/sources.list.d/*.sources; do
      [ -e "$f" ] || continue
      uri=$(awk -v RS= -v want="$want" '
        { types = ""; uris = ""; suites = ""; comps = ""; enabled = "yes"
          n = split($0, line, "\n")
          for (i = 1; i <= n; i++) {
            l = line[i]
            if (l ~ /^#/) continue
            if (sub(/^Types:[ \t]*/, "", l)) types = l
            else if (sub(/^URIs:[ \t]*/, "", l)) uris = l
            else if (sub(/^Suites:[ \t]*/, "", l)) suites = l
            else if (sub(/^Components:[ \t]*/, "", l)) comps = l
            else if (sub(/^Enabled:[ \t]*/, "", l)) enabled = l
          }
          if (enabled == "no" || (" " types " ") !~ / deb / || (" " comps " ") !~ / main /) next
          if (want != "" && (" " suites " ") !~ (" " want " ")) next
          k = split(uris, u, /[ \t]+/)
          for (i = 1; i <= k; i++) if (u[i] != "" && u[i] !~ /security/) { print u[i]; exit }
        }' "$f")
      [ -n "$uri" ] && { echo "$uri"; return; }
    done
    for f in /etc/apt/sources.list /etc/apt/sources.list.d/*.list; do
      [ -e "$f" ] || continue
      uri=$(awk -v want="$want" '
        $1 == "deb" {
          i = 2
          if ($i ~ /^\[/) { while (i <= NF && $i !~ /\]$/) i++; i++ }
          u = $i; s = $(i + 1); main = 0
          for (j = i + 2; j <= NF; j++) if ($j == "main") main = 1
          if (main && u !~ /security/ && (want == "" || s == want)) { print u; exit }
        }' "$f")
      [ -n "$uri" ] && { echo "$uri"; return; }
    done
  done
  echo "debian-fetch: no Debian archive URI in this machine's apt sources (an enabled deb source" \
    "with the component main)" >&2
  return 1
}

state=$cache/apt/$suite-$arch
new_state=0
[ -d "$state" ] || new_state=1
mkdir -p "$state/lists/partial" "$state/archives/partial" "$state/sources.list.d" "$cache/debs"
uri=$(archive_uri)
echo "deb [arch=$arch] $uri $suite main" > "$state/sources.list"
apt_opts=(-o "Dir::Etc::sourcelist=$state/sources.list" -o "Dir::Etc::sourceparts=$state/sources.list.d"
  -o "Dir::State::Lists=$state/lists" -o "Dir::Cache=$state" -o "Dir::State::status=/dev/null"
  -o "APT::Architecture=$arch" -o "APT::Architectures::=$arch" -o "Debug::NoLocking=1"
  -o "APT::Sandbox::User=root")
# Lists older than a day are refreshed; if that fails (no network), lists we have still serve
# for the packages already in the cache.
if [ -z "$(find "$state/lists" -name "*_binary-${arch}_Packages*" -mtime -1 2>/dev/null | head -1)" ]; then
  if ! apt-get "${apt_opts[@]}" update >&2; then
    if [ -n "$(find "$state/lists" -name "*_binary-${arch}_Packages*" 2>/dev/null | head -1)" ]; then
      echo "debian-fetch: cannot refresh $suite ($arch) from $uri; using the lists we have" >&2
    else
      [ $new_state -eq 1 ] && rm -rf "$state"
      echo "debian-fetch: cannot read suite $suite ($arch) from $uri: a suite the archive lacks, or no network" >&2
      exit 1
    fi
  fi
  if [ -z "$(find "$state/lists" -name "*_binary-${arch}_Packages*" 2>/dev/null | head -1)" ]; then
    [ $new_state -eq 1 ] && rm -rf "$state"
    echo "debian-fetch: the archive's $suite has no packages for architecture $arch" >&2
    exit 1
  fi
fi

# The first dependency of package $1 whose name matches the extended regular expression $2.
depends_on() {
  apt-cache "${apt_opts[@]}" depends "$1" 2>/dev/null |
    awk -v re="$2" '$1 ~ /Depends:$/ && $2 ~ re { print $2; exit }' || true
}

for want in "$@"; do
  pkg=$want
  if [[ $want == kernel:* ]]; then
    # The flavour's metapackage depends on the versioned image package; in sid (Linux 7.2)
    # vmlinuz is in a linux-binary-* package that one depends on.
    flavour=${want#kernel:}
    pkg=$(depends_on "linux-image-$flavour" "^linux-image-[0-9].*-$flavour\$")
    [ -n "$pkg" ] || { echo "debian-fetch: no kernel of flavour $flavour in $suite/$arch" >&2; exit 1; }
    binary=$(depends_on "$pkg" "^linux-binary-[0-9].*-$flavour\$")
    [ -n "$binary" ] && pkg=$binary
  fi
  version=$(apt-cache "${apt_opts[@]}" show "$pkg" 2>/dev/null | awk '/^Version:/ { print $2; exit }' || true)
  [ -n "$version" ] || { echo "debian-fetch: $pkg is not in $suite/$arch" >&2; exit 1; }
  file=$cache/debs/${pkg}_${version//:/%3a}_$arch.deb
  [ -e "$file" ] || file=$cache/debs/${pkg}_${version//:/%3a}_all.deb
  if [ ! -e "$file" ]; then
    # Into a folder of its own, then renamed: apt-get writes the final name as it downloads, and
    # an interrupted download must not look cached.
    partial=$(mktemp -d "$cache/debs/partial.XXXXXX")
    (cd "$partial" && apt-get "${apt_opts[@]}" download "$pkg=$version" >&2) || { rm -rf "$partial"; exit 1; }
    got=$(ls "$partial/${pkg}_${version//:/%3a}_"*.deb | head -1)
    file=$cache/debs/$(basename "$got")
    mv "$got" "$file"
    rm -rf "$partial"
  fi
  echo "$file"
done
