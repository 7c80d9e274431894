#!/usr/bin/env bash
# Fails when a dependency asks for a newer Rust than the workspace declares: any package of
# `cargo metadata` (the lock file's versions, for every platform) whose `rust-version` is above
# the lowest of the workspace members', and a member that declares none. The other half of the
# MSRV check is clippy's `incompatible_msrv` (denied in [workspace.lints.clippy]), which refuses
# std APIs newer than `rust-version`. Neither sees language features (let chains need 1.88).
#
#   scripts/check-msrv.sh
set -euo pipefail
cd "$(dirname "$0")/.."

program=$(
  cat <<'PY'
import json, sys

def version(text):
    parts = [int(part) for part in text.split(".")]
    return tuple(parts + [0] * (3 - len(parts)))

metadata = json.load(sys.stdin)
members = set(metadata["workspace_members"])
ours = {}
for package in metadata["packages"]:
    if package["id"] in members:
        if not package.get("rust_version"):
            sys.exit("%s declares no rust-version" % package["name"])
        ours[package["name"]] = package["rust_version"]
msrv = min(ours.values(), key=version)
declared = [
    (version(p["rust_version"]), p["name"], p["version"], p["rust_version"])
    for p in metadata["packages"]
    if p["id"] not in members and p.get("rust_version")
]
above = sorted(d for d in declared if d[0] > version(msrv))
if above:
    print("dependencies that need a newer Rust than rust-version = %s:" % msrv, file=sys.stderr)
    for _, name, package_version, needs in above:
        print("   %s %s: rust-version %s" % (name, package_version, needs), file=sys.stderr)
    print("(raise rust-version in Cargo.toml, or keep the older version:"
          " cargo update -p NAME --precise VERSION)", file=sys.stderr)
    sys.exit(1)
top = max(declared)
print("rust-version %s: no dependency needs more (the most: %s %s, %s)"
      % (msrv, top[1], top[2], top[3]))
PY
)
cargo metadata --format-version 1 --locked | python3 -c "$program"
