#!/usr/bin/env bash
# Same-run comparison of Switchboard and Redis on this machine (issue 4's yardstick).
# Starts a release gateway and its own Redis on spare loopback ports, runs sbbench and redis-benchmark at the same
# concurrency, and prints ops/s and the ratio. Usage: Tools/bench/compare-redis.sh [requests] [rounds]
set -euo pipefail
cd "$(dirname "$0")/../.."
requests="${1:-200000}"
rounds="${2:-1}"
command -v redis-server >/dev/null || { apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq redis-server redis-tools; }
swift build -c release --product switchboard --product sbbench >/dev/null
bin=.build/release
work=$(mktemp -d)
trap 'kill $(jobs -p) 2>/dev/null || true; rm -rf "$work"' EXIT

start_switchboard() {  # $1 durability, $2 threads
  rm -f "$work/sb.sqlite"*
  $bin/switchboard --tcp 127.0.0.1:17400 --unix-socket off --database "$work/sb.sqlite" --durability "$1" \
    --threads "$2" --rate-limit 0 --log-level error &
  sb_pid=$!
  for _ in $(seq 100); do (exec 3<>/dev/tcp/127.0.0.1/17400) 2>/dev/null && break; sleep 0.05; done
}
start_redis() {  # $1 appendonly yes|no
  rm -rf "$work"/appendonly* "$work"/*.rdb
  redis-server --port 17401 --bind 127.0.0.1 --save '' --appendonly "$1" --appendfsync always --dir "$work" \
    --daemonize no --logfile "$work/redis.log" &
  redis_pid=$!
  for _ in $(seq 100); do redis-cli -p 17401 ping >/dev/null 2>&1 && break; sleep 0.05; done
}
sb_rate() {  # $1 op, $2 depth
  $bin/sbbench requests --tcp 127.0.0.1:17400 --connections 50 --depth "$2" --op "$1" --count "$requests" \
    --server-pid "$sb_pid" | awk -F': ' '/requests_per_second|p99_us|server_cpu/ {printf "%s=%s ", $1, $2}'
}
redis_rate() {  # $1 command, $2 depth
  redis-benchmark -p 17401 -c 50 -n "$requests" -P "$2" -q $1 | tr '\r' '\n' \
    | grep -oE "[0-9.]+ requests per second" | tail -1 | awk '{print $1}'
}

for round in $(seq "$rounds"); do
  for depth in 1 16; do
    threads=$([ "$depth" = 1 ] && echo 1 || echo 2)
    start_redis yes; redis_durable=$(redis_rate "hset user:Tony Name Tony" "$depth"); kill $redis_pid; wait $redis_pid 2>/dev/null || true
    start_switchboard commit "$threads"; sb_durable=$(sb_rate set "$depth"); kill -INT $sb_pid; wait $sb_pid 2>/dev/null || true
    start_redis no; redis_fast=$(redis_rate "hset user:Tony Name Tony" "$depth")
    redis-cli -p 17401 hset user:user-1 a 1 b 2 c 3 >/dev/null
    redis_get=$(redis_rate "hgetall user:user-1" "$depth"); kill $redis_pid; wait $redis_pid 2>/dev/null || true
    start_switchboard apply "$threads"; sb_fast=$(sb_rate set "$depth")
    $bin/sbbench requests --tcp 127.0.0.1:17400 --connections 50 --depth 1 --op set3 --count 500 >/dev/null
    sb_get=$(sb_rate get "$depth"); kill -INT $sb_pid; wait $sb_pid 2>/dev/null || true
    echo "round $round depth $depth (switchboard threads $threads)"
    echo "  durable set:   switchboard $sb_durable | redis HSET appendfsync always: $redis_durable ops/s"
    echo "  ack-before-commit set: switchboard $sb_fast | redis HSET no persistence: $redis_fast ops/s"
    echo "  get:           switchboard $sb_get | redis HGETALL: $redis_get ops/s"
  done
done
