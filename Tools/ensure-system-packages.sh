#!/usr/bin/env bash
# Installs the C libraries the package links (zlib, SQLite) when they are missing, and any further Debian packages
# named as arguments (the test suite names redis-server, for sbbench's redis-fanout against a real Redis;
# postgresql, for the cluster tests, which start servers of their own; and tmux, for sbctl's shell on a real terminal).
# Debian/Ubuntu only.
set -euo pipefail
needed=(zlib1g-dev libsqlite3-dev "$@")
missing=()
for pkg in "${needed[@]}"; do
  dpkg -s "$pkg" >/dev/null 2>&1 || missing+=("$pkg")
done
[ ${#missing[@]} -eq 0 ] && exit 0
echo "installing missing system packages: ${missing[*]}" >&2
if [ "$(id -u)" -eq 0 ]; then sudo=""; else sudo="sudo"; fi
$sudo apt-get update -qq
DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq "${missing[@]}"
