#!/usr/bin/env bash
# Installs the C libraries the package links (zlib, SQLite) when they are missing, and any further Debian packages
# named as arguments (the test suite names redis-server, for sbbench's redis-fanout against a real Redis;
# postgresql, for the cluster tests, which start servers of their own; and tmux, for sbctl's shell on a real terminal).
# An argument py:MODULE=PACKAGE names a Python module instead, installed with pip when `import MODULE` fails (the
# test suite names py:jwt=PyJWT and py:cryptography=cryptography: Docs/examples/mint_token.py mints tokens with them).
# Debian/Ubuntu only.
set -euo pipefail
needed=(zlib1g-dev libsqlite3-dev)
python_modules=()
for argument in "$@"; do
  case "$argument" in
    py:*) python_modules+=("${argument#py:}") ;;
    *) needed+=("$argument") ;;
  esac
done
missing=()
for pkg in "${needed[@]}"; do
  dpkg -s "$pkg" >/dev/null 2>&1 || missing+=("$pkg")
done
if [ ${#missing[@]} -gt 0 ]; then
  echo "installing missing system packages: ${missing[*]}" >&2
  if [ "$(id -u)" -eq 0 ]; then sudo=""; else sudo="sudo"; fi
  $sudo apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq "${missing[@]}"
fi
for entry in ${python_modules[@]+"${python_modules[@]}"}; do
  module="${entry%%=*}"
  package="${entry#*=}"
  python3 -c "import $module" 2>/dev/null && continue
  echo "installing the missing Python package $package" >&2
  # Debian's Python refuses pip installs outside a virtual environment unless told (PEP 668).
  python3 -m pip install -q "$package" 2>/dev/null || python3 -m pip install -q --break-system-packages "$package"
done
