#!/usr/bin/env bash
# Where a durable set's server CPU goes, Switchboard against Redis in the same run (issue 4's durable-write target).
# For each round and depth it runs, one after the other on the same loopback port pair:
#   - a release gateway (one event loop, --durability commit: each set answered after its commit was synced) driven
#     by `sbbench requests --op set` (50 connections, each writing its own user's metadata);
#   - Redis with `appendfsync always` driven by `redis-benchmark -c 50 HSET`;
# and prints each server's requests per second and its user and system CPU per request (utime and stime from
# /proc/PID/stat, before and after the run). With `perf` on the PATH, a second gateway run of the same load, sampled
# by perf (which slows it, hence apart from the measured run), gives SQLite's share of the gateway's CPU (libsqlite3's
# samples), printed with that share of the measured run's CPU in microseconds per request.
# Usage: Tools/bench/cpu-split.sh [requests] [rounds] [depths]
#   requests  requests per run at depth 1 (default 300000; depth 16 runs five times as many)
#   rounds    repetitions (default 3)
#   depths    pipelining depths, space-separated (default "1 16")
set -euo pipefail
cd "$(dirname "$0")/../.."
requests="${1:-300000}"
rounds="${2:-3}"
depths="${3:-1 16}"
command -v redis-server >/dev/null || { apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq redis-server redis-tools; }
swift build -c release --product switchboard >/dev/null
swift build -c release --product sbbench >/dev/null
bin=.build/release
ticks=$(getconf CLK_TCK)
work=$(mktemp -d)
trap 'kill $(jobs -p) 2>/dev/null || true; rm -rf "$work"' EXIT

cpu_ticks() { awk '{ print $14, $15 }' "/proc/$1/stat"; }  # utime stime
per_request() {  # $1 ticks, $2 requests: microseconds per request
  awk -v t="$1" -v n="$2" -v hz="$ticks" 'BEGIN { printf "%.2f", t / hz * 1e6 / n }'
}
wait_for_port() { for _ in $(seq 100); do (exec 3<>"/dev/tcp/127.0.0.1/$1") 2>/dev/null && return; sleep 0.05; done; }

run_gateway() {  # $1: "perf" to sample it; runs $count requests at $depth; sets report, user and system ticks used, and sqlite_share
  rm -f "$work"/sb.sqlite*
  $bin/switchboard --tcp 127.0.0.1:17410 --unix-socket off --database "$work/sb.sqlite" --durability commit \
    --threads 1 --rate-limit 0 --log-level error &
  local pid=$! perf_pid="" user0 system0 user1 system1
  wait_for_port 17410
  if [ "$1" = perf ]; then
    perf record -q -F 999 -p "$pid" -o "$work/perf.data" 2>/dev/null &
    perf_pid=$!
  fi
  read -r user0 system0 < <(cpu_ticks "$pid")
  report=$($bin/sbbench requests --tcp 127.0.0.1:17410 --connections 50 --depth "$depth" --op set --count "$count")
  read -r user1 system1 < <(cpu_ticks "$pid")
  user_ticks=$((user1 - user0)); system_ticks=$((system1 - system0))
  if [ -n "$perf_pid" ]; then
    kill -INT "$perf_pid"; wait "$perf_pid" 2>/dev/null || true
    sqlite_share=$(perf report -i "$work/perf.data" --sort dso --stdio 2>/dev/null \
      | awk '/libsqlite3/ { gsub("%", "", $1); print $1 }')
  fi
  kill -INT "$pid"; wait "$pid" 2>/dev/null || true
}

for round in $(seq "$rounds"); do
  for depth in $depths; do
    count=$([ "$depth" = 1 ] && echo "$requests" || echo $((requests * 5)))
    sqlite_share=""
    run_gateway measured
    sb_user=$(per_request "$user_ticks" "$count"); sb_system=$(per_request "$system_ticks" "$count")
    rps=$(awk -F': ' '$1 == "requests_per_second" { print $2 }' <<<"$report")
    sqlite_line=""
    if command -v perf >/dev/null; then
      measured_report=$report
      run_gateway perf
      report=$measured_report
    fi
    if [ -n "$sqlite_share" ]; then
      sqlite_line=$(awk -v s="$sqlite_share" -v u="$sb_user" -v k="$sb_system" \
        'BEGIN { printf ", SQLite %.1f%% of its CPU = %.2f us/request", s, s / 100 * (u + k) }')
    fi

    rm -rf "$work"/appendonly* "$work"/*.aof
    redis-server --port 17411 --bind 127.0.0.1 --save '' --appendonly yes --appendfsync always --dir "$work" \
      --daemonize no --logfile "$work/redis.log" &
    redis_pid=$!
    for _ in $(seq 100); do redis-cli -p 17411 ping >/dev/null 2>&1 && break; sleep 0.05; done
    read -r user0 system0 < <(cpu_ticks "$redis_pid")
    redis_rps=$(redis-benchmark -p 17411 -c 50 -n "$count" -P "$depth" -q hset user:Tony Name Tony | tr '\r' '\n' \
      | grep -oE "[0-9.]+ requests per second" | tail -1 | awk '{ print $1 }')
    read -r user1 system1 < <(cpu_ticks "$redis_pid")
    kill "$redis_pid"; wait "$redis_pid" 2>/dev/null || true

    echo "round $round depth $depth"
    printf '  switchboard %8s/s  user %6s us/request  system %6s us/request%s\n' \
      "$rps" "$sb_user" "$sb_system" "$sqlite_line"
    printf '  redis       %8s/s  user %6s us/request  system %6s us/request\n' \
      "$redis_rps" "$(per_request $((user1 - user0)) "$count")" "$(per_request $((system1 - system0)) "$count")"
  done
done
