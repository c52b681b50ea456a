#!/usr/bin/env bash
# Fetches a Debian suite's current kernel image of one flavour (scripts/debian-fetch.sh), unpacks
# it into a folder (emptied first; not installed) and prints the path of its vmlinuz. Used by
# run-vm.sh and run-aarch64.sh.
#
# Usage: scripts/debian-kernel.sh CACHE SUITE ARCH FLAVOUR DEST
#   e.g. scripts/debian-kernel.sh build/vm/cache sid amd64 cloud-amd64 build/vm/sid-numa/kernel
# Prints the .deb's path on the first line and vmlinuz's on the second.
set -euo pipefail
[ $# -eq 5 ] || { echo "usage: $0 CACHE SUITE ARCH FLAVOUR DEST" >&2; exit 2; }
cache=$1 suite=$2 arch=$3 flavour=$4 dest=$5
deb=$("$(dirname "$0")/debian-fetch.sh" "$cache" "$suite" "$arch" "kernel:$flavour" | tail -1)
rm -rf "$dest" && mkdir -p "$dest"
dpkg-deb -x "$deb" "$dest"
# boot/vmlinuz-VERSION in bullseye's, bookworm's and trixie's packages,
# usr/lib/modules/VERSION/vmlinuz in sid's.
vmlinuz=$(find "$dest" -type f \( -name 'vmlinuz-*' -o -name vmlinuz \) | head -1)
[ -n "$vmlinuz" ] || { echo "debian-kernel: no vmlinuz in $deb" >&2; exit 1; }
echo "$deb"
echo "$vmlinuz"
