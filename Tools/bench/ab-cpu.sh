#!/usr/bin/env bash
# Two gateway builds against each other, interleaved (A, B, then B, A, ...), on the request loads of cpu-split.sh:
# a change's cost per request on a machine too noisy for one run of each. For each pair and scenario it starts the
# release gateway (one event loop, no rate limit) on a fresh database, runs `sbbench requests` (50 connections) and
# prints requests/s, p99 and the gateway's user and system CPU per request (utime and stime from /proc/PID/stat).
# Keep copies of the two release binaries side by side (e.g. /tmp/switchboard-old, /tmp/switchboard-new).
# Usage: Tools/bench/ab-cpu.sh A_BINARY B_BINARY [pairs] [scenarios]
#   scenarios  any of set16 set1 ack16 get16 (default all four): durable set at depth 16 and 1, set answered before
#              its commit (--durability apply) at depth 16, get at depth 16
# Environment: SBBENCH (default .build/release/sbbench), PORT (default 17510).
set -uo pipefail
a="$1" b="$2" pairs="${3:-3}" scenarios="${4:-set16 set1 ack16 get16}"
sbbench="${SBBENCH:-.build/release/sbbench}" port="${PORT:-17510}"
ticks=$(getconf CLK_TCK)
work=$(mktemp -d)
trap 'kill $(jobs -p) 2>/dev/null || true; rm -rf "$work"' EXIT
cpu_ticks() { awk '{ print $14, $15 }' "/proc/$1/stat"; }
per_request() { awk -v t="$1" -v n="$2" -v hz="$ticks" 'BEGIN { printf "%.2f", t / hz * 1e6 / n }'; }
wait_for_port() { for _ in $(seq 200); do (exec 3<>"/dev/tcp/127.0.0.1/$1") 2>/dev/null && return; sleep 0.05; done; }
run() {  # $1 label, $2 binary, $3 scenario
  local label=$1 binary=$2 scenario=$3 durability=commit depth=16 op=set count=1500000
  case $scenario in
    set1) depth=1; count=300000 ;;
    ack16) durability=apply ;;
    get16) op=get ;;
  esac
  rm -f "$work"/sb.sqlite*
  "$binary" --tcp "127.0.0.1:$port" --unix-socket off --database "$work/sb.sqlite" --durability "$durability" \
    --threads 1 --rate-limit 0 --log-level error &
  local pid=$! user0 system0 user1 system1 report
  wait_for_port "$port"
  [ "$op" = get ] && "$sbbench" requests --tcp "127.0.0.1:$port" --connections 50 --op set --count 5000 >/dev/null
  read -r user0 system0 < <(cpu_ticks "$pid")
  report=$("$sbbench" requests --tcp "127.0.0.1:$port" --connections 50 --depth "$depth" --op "$op" --count "$count")
  read -r user1 system1 < <(cpu_ticks "$pid")
  kill -INT "$pid"; wait "$pid" 2>/dev/null
  printf '%s %-6s rps %9s p99_us %8s user %6s us/req system %6s us/req\n' "$label" "$scenario" \
    "$(awk -F': ' '$1 == "requests_per_second" { print $2 }' <<<"$report")" \
    "$(awk -F': ' '$1 == "p99_us" { print $2 }' <<<"$report")" \
    "$(per_request $((user1 - user0)) "$count")" "$(per_request $((system1 - system0)) "$count")"
}
for pair in $(seq "$pairs"); do
  order="A B"; [ $((pair % 2)) = 0 ] && order="B A"
  for label in $order; do
    binary=$a; [ "$label" = B ] && binary=$b
    for scenario in $scenarios; do run "$label" "$binary" "$scenario"; done
  done
done
