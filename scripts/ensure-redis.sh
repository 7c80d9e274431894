#!/usr/bin/env bash
# Installs what the tests need from Debian's packages when it is missing: redis-server (also
# run as a sentinel, redis-server --sentinel) and redis-cli; as root, iptables (for `redis-locks check --fault partition` and the packet
# faults) and faketime (for `--fault client-clock-step`); tmux, in which the test of
# `redis-locks top` drives it as a person would.
# As root, or through sudo without a password; says clearly what to do when neither works.
set -euo pipefail

missing=()
command -v redis-server >/dev/null 2>&1 || missing+=(redis-server)
# redis-cli creates the test clusters (redis-cli --cluster create).
command -v redis-cli >/dev/null 2>&1 || missing+=(redis-tools)
command -v tmux >/dev/null 2>&1 || missing+=(tmux)
if [ "$(id -u)" -eq 0 ] && ! command -v iptables >/dev/null 2>&1; then
  missing+=(iptables)
fi
if [ "$(id -u)" -eq 0 ] && [ ! -e /usr/lib/x86_64-linux-gnu/faketime/libfaketime.so.1 ] \
  && [ "$(uname -m)" = x86_64 ]; then
  missing+=(faketime)
fi
if [ "${#missing[@]}" -eq 0 ]; then
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
  echo "${missing[*]} missing and this is not a Debian-like system (no apt-get)." >&2
  echo "Install redis-server 7 with your package manager and put it on PATH." >&2
  exit 1
fi

echo "Installing ${missing[*]} from Debian's packages..." >&2
"${as_root[@]}" apt-get update -qq
DEBIAN_FRONTEND=noninteractive "${as_root[@]}" apt-get install -y -qq "${missing[@]}" >/dev/null
command -v redis-server >/dev/null 2>&1
