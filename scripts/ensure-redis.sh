#!/usr/bin/env bash
# Installs redis-server (and redis-cli) from Debian's packages when they are missing.
# As root, or through sudo without a password; says clearly what to do when neither works.
set -euo pipefail

if command -v redis-server >/dev/null 2>&1; then
  exit 0
fi

if [ "$(id -u)" -eq 0 ]; then
  as_root=()
elif command -v sudo >/dev/null 2>&1 && sudo -n true 2>/dev/null; then
  as_root=(sudo -n)
else
  echo "redis-server is not installed, and installing it needs root." >&2
  echo "Run: sudo apt-get update && sudo apt-get install -y redis-server redis-tools" >&2
  exit 1
fi

if ! command -v apt-get >/dev/null 2>&1; then
  echo "redis-server is not installed and this is not a Debian-like system (no apt-get)." >&2
  echo "Install redis-server 7 with your package manager and put it on PATH." >&2
  exit 1
fi

echo "Installing redis-server from Debian's packages..." >&2
"${as_root[@]}" apt-get update -qq
DEBIAN_FRONTEND=noninteractive "${as_root[@]}" apt-get install -y -qq redis-server redis-tools >/dev/null
command -v redis-server >/dev/null 2>&1
