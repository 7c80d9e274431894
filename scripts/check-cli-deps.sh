#!/usr/bin/env bash
# Fails when the installed command-line tool would link a crate it does not use: `redis-locks`
# (crates/redis-locks-cli) is what `cargo install` puts on PATH, and plotting (plotters) and
# histograms (hdrhistogram) belong to redis-locks-bench. Checks the normal dependencies of
# PACKAGE (default redis-locks-cli), as `cargo tree -e normal` lists them.
#
#   scripts/check-cli-deps.sh [PACKAGE]
set -euo pipefail
cd "$(dirname "$0")/.."

package=${1:-redis-locks-cli}
tree=$(cargo tree -p "$package" -e normal --prefix none)
if banned=$(grep -E '^(plotters|hdrhistogram) ' <<<"$tree" | sort -u); then
  echo "$package must not depend on plotters or hdrhistogram; it does on:" >&2
  echo "$banned" | sed 's/^/   /' >&2
  echo "(cargo tree -p $package -e normal -i CRATE shows through what)" >&2
  exit 1
fi
echo "$package: no plotters, no hdrhistogram"
