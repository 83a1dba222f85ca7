#!/usr/bin/env bash
# Fuzzes the HTTP API (Docs/http-api.md) from its OpenAPI document with schemathesis, bounded in time:
#   Tools/api-fuzz.sh PATH-TO-switchboard [SECONDS]      (default 60 s of generated requests; `make test` runs it)
# Starts the gateway with --api on a free loopback port and an API key, points schemathesis at the served
# /openapi.json, and fails on any check but positive_data_acceptance: the document cannot state every rule of the
# wire (an identifier's 1-64 bytes, an update needing an item, a channel name that is not empty), so a request it
# allows may still be refused with the wire's 400; every other check holds (no 5xx, statuses, content types and
# bodies as documented, schema-invalid requests refused, requests without a key refused).
# schemathesis lives in a virtual environment under .build (created on first use, pinned below).
set -euo pipefail
binary=${1:?usage: Tools/api-fuzz.sh PATH-TO-switchboard [SECONDS]}
seconds=${2:-60}
root=$(cd "$(dirname "$0")/.." && pwd)
venv="$root/.build/schemathesis-venv"
version=4.32.5
if ! "$venv/bin/st" --version 2>/dev/null | grep -q "$version"; then
  python3 -m venv "$venv"
  "$venv/bin/pip" install -q "schemathesis==$version"
fi
work=$(mktemp -d)
gateway=""
cleanup() {
  if [ -n "$gateway" ]; then kill "$gateway" 2>/dev/null || true; wait "$gateway" 2>/dev/null || true; fi
  rm -rf "$work"
}
trap cleanup EXIT
key="sk_fuzz_$(head -c 16 /dev/urandom | od -An -tx1 | tr -d ' \n')"
echo "fuzz $key" > "$work/keys"
# Webhooks on (to a port nobody listens on, with few tries), so their dead-letter routes are fuzzed too.
cat > "$work/webhooks.json" <<'JSON'
{"endpoints": [{"name": "fuzz", "url": "http://127.0.0.1:9/hooks",
  "secrets": ["whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw"], "maxAttempts": 2}]}
JSON
SWITCHBOARD_TOKEN_SECRET="fuzz-secret-$(head -c 16 /dev/urandom | od -An -tx1 | tr -d ' \n')" \
  "$binary" --tcp 127.0.0.1:0 --unix-socket off --database "$work/fuzz.sqlite" --api 127.0.0.1:0 \
  --api-key-file "$work/keys" --webhooks "$work/webhooks.json" 2>"$work/gateway.log" &
gateway=$!
api=""
for _ in $(seq 1 300); do
  api=$(grep -o 'api=http://[0-9.:]*' "$work/gateway.log" | head -1 | cut -d= -f2 || true)
  [ -n "$api" ] && break
  kill -0 "$gateway" 2>/dev/null || break
  sleep 0.1
done
if [ -z "$api" ]; then
  echo "api-fuzz: the gateway did not start its API:" >&2
  cat "$work/gateway.log" >&2
  exit 1
fi
echo "api-fuzz: schemathesis $version against $api for ${seconds} s"
status=0
(cd "$work" && "$venv/bin/st" run "$api/openapi.json" --header "Authorization: Bearer $key" \
  --checks all --exclude-checks positive_data_acceptance --max-time "$seconds" --workers 2 \
  --request-timeout 10 --max-response-time 5 --warnings off) || status=$?
if ! kill -0 "$gateway" 2>/dev/null; then
  echo "api-fuzz: the gateway died during the run:" >&2
  tail -50 "$work/gateway.log" >&2
  exit 1
fi
exit "$status"
