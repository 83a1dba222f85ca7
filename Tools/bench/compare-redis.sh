#!/usr/bin/env bash
# Same-run comparison of Switchboard and Redis on this machine (issue 4's yardstick).
# Starts a release gateway and its own Redis on spare loopback ports, and prints Switchboard's figure, Redis's and
# their ratio (Switchboard / Redis) for:
#   - request throughput: sbbench requests (set, get) vs redis-benchmark HSET/HGETALL at the same concurrency;
#   - fan-out latency to S subscribers: sbbench storage-fanout and online-fanout vs sbbench redis-fanout (Redis
#     PUBLISH/SUBSCRIBE), one event at a time, all measured by sbbench on one clock.
# Usage: Tools/bench/compare-redis.sh [requests] [rounds] [subscribers] [events]
#   requests     requests per throughput run (default 200000)
#   rounds       repetitions of the whole table (default 1)
#   subscribers  fan-out subscriber connections (default 5000; each side needs that many file descriptors)
#   events       fan-out events per run (storage-fanout, redis-fanout) and logins (online-fanout rounds: events/10)
# Any sbbench run that is broken (lost events, error responses) stops the script with its reason.
# SB_BUILD=debug uses debug builds (for a quick check of the script itself; the figures are then meaningless).
set -euo pipefail
cd "$(dirname "$0")/../.."
requests="${1:-200000}"
rounds="${2:-1}"
subscribers="${3:-5000}"
events="${4:-100}"
ulimit -n 20000 2>/dev/null || true
command -v redis-server >/dev/null || { apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq redis-server redis-tools; }
config="${SB_BUILD:-release}"
# (One --product per invocation: SwiftPM builds only the last one named.)
swift build -c "$config" --product switchboard >/dev/null
swift build -c "$config" --product sbbench >/dev/null
bin=".build/$config"
work=$(mktemp -d)
trap 'kill $(jobs -p) 2>/dev/null || true; rm -rf "$work"' EXIT

start_switchboard() {  # $1 durability, $2 threads
  rm -f "$work/sb.sqlite"*
  $bin/switchboard --tcp 127.0.0.1:17400 --unix-socket off --database "$work/sb.sqlite" --durability "$1" \
    --threads "$2" --rate-limit 0 --log-level error &
  sb_pid=$!
  for _ in $(seq 100); do (exec 3<>/dev/tcp/127.0.0.1/17400) 2>/dev/null && break; sleep 0.05; done
}
stop_switchboard() { kill -INT $sb_pid; wait $sb_pid 2>/dev/null || true; }
start_redis() {  # $1 appendonly yes|no
  rm -rf "$work"/appendonly* "$work"/*.rdb
  redis-server --port 17401 --bind 127.0.0.1 --save '' --appendonly "$1" --appendfsync always --dir "$work" \
    --maxclients $((subscribers + 100)) --daemonize no --logfile "$work/redis.log" &
  redis_pid=$!
  for _ in $(seq 100); do redis-cli -p 17401 ping >/dev/null 2>&1 && break; sleep 0.05; done
}
stop_redis() { kill $redis_pid; wait $redis_pid 2>/dev/null || true; }
field() {  # $1 sbbench text report, $2 key: the value
  awk -F': ' -v key="$2" '$1 == key { print $2 }' <<<"$1"
}
ratio() {  # $1 / $2 with two decimals, "-" when either is missing
  awk -v a="$1" -v b="$2" 'BEGIN { if (a == "" || b == "" || b + 0 == 0) print "-"; else printf "%.2fx", a / b }'
}
sb_rate() {  # $1 op, $2 depth: the sbbench report
  $bin/sbbench requests --tcp 127.0.0.1:17400 --connections 50 --depth "$2" --op "$1" --count "$requests" --server-pid "$sb_pid"
}
redis_rate() {  # $1 command, $2 depth: requests per second
  redis-benchmark -p 17401 -c 50 -n "$requests" -P "$2" -q $1 | tr '\r' '\n' \
    | grep -oE "[0-9.]+ requests per second" | tail -1 | awk '{print $1}'
}
throughput_row() {  # $1 label, $2 sbbench report, $3 redis ops/s
  local rps; rps=$(field "$2" requests_per_second)
  printf '  %-46s switchboard %8s/s (p99 %s us, server cpu %s%%) | redis %8s/s | %s\n' \
    "$1" "$rps" "$(field "$2" p99_us)" "$(field "$2" server_cpu_percent)" "$3" "$(ratio "$rps" "$3")"
}
latency_row() {  # $1 label, $2 switchboard report, $3 key prefix in it ("" or "login_"), $4 redis report
  local line; line=$(printf '  %-44s' "$1")
  for p in p50 p99 max; do
    local sb redis; sb=$(field "$2" "${3}delivery_${p}_us"); redis=$(field "$4" "delivery_${p}_us")
    line+=$(printf ' | %s %s/%s us (%s)' "$p" "$sb" "$redis" "$(ratio "$sb" "$redis")")
  done
  local sb_last redis_last; sb_last=$(field "$2" "${3}last_delivery_p50_us"); redis_last=$(field "$4" last_delivery_p50_us)
  line+=$(printf ' | last subscriber p50 %s/%s us (%s)' "$sb_last" "$redis_last" "$(ratio "$sb_last" "$redis_last")")
  echo "$line"
}

for round in $(seq "$rounds"); do
  for depth in 1 16; do
    threads=$([ "$depth" = 1 ] && echo 1 || echo 2)
    start_redis yes; redis_durable=$(redis_rate "hset user:Tony Name Tony" "$depth"); stop_redis
    start_switchboard commit "$threads"; sb_durable=$(sb_rate set "$depth"); stop_switchboard
    start_redis no; redis_fast=$(redis_rate "hset user:Tony Name Tony" "$depth")
    redis-cli -p 17401 hset user:user-1 a 1 b 2 c 3 >/dev/null
    redis_get=$(redis_rate "hgetall user:user-1" "$depth"); stop_redis
    start_switchboard apply "$threads"; sb_fast=$(sb_rate set "$depth")
    $bin/sbbench requests --tcp 127.0.0.1:17400 --connections 50 --depth 1 --op set3 --count 500 >/dev/null
    sb_get=$(sb_rate get "$depth"); stop_switchboard
    echo "round $round depth $depth (switchboard threads $threads; ratio = switchboard / redis, higher is better)"
    throughput_row "durable set vs HSET appendfsync always:" "$sb_durable" "$redis_durable"
    throughput_row "ack-before-commit set vs HSET no persistence:" "$sb_fast" "$redis_fast"
    throughput_row "get (3 items) vs HGETALL:" "$sb_get" "$redis_get"
  done

  # Fan-out: one event at a time (the next once every subscriber has the previous one), so each figure is the
  # latency of one fan-out, not of a queue. Switchboard acknowledges before the commit here, as Redis PUBLISH
  # persists nothing.
  start_switchboard apply 1
  sb_storage=$($bin/sbbench storage-fanout --tcp 127.0.0.1:17400 --subscribers "$subscribers" --events "$events" \
    --server-pid "$sb_pid")
  sb_online=$($bin/sbbench online-fanout --tcp 127.0.0.1:17400 --subscribers "$subscribers" \
    --rounds $(( events / 10 > 0 ? events / 10 : 1 )) --server-pid "$sb_pid")
  stop_switchboard
  start_redis no
  redis_fanout=$($bin/sbbench redis-fanout --redis 127.0.0.1:17401 --subscribers "$subscribers" --events "$events" \
    --server-pid "$redis_pid")
  stop_redis
  echo "round $round fan-out to $subscribers subscribers (switchboard/redis delivery latency; ratio = switchboard / redis, lower is better)"
  latency_row "storage event (setUserMetadata) vs PUBLISH:" "$sb_storage" "" "$redis_fanout"
  latency_row "online state (login HELLO) vs PUBLISH:" "$sb_online" "login_" "$redis_fanout"
  printf '  server cpu: switchboard storage %s%%, online %s%%, redis %s%%; sbbench cpu: %s%%, %s%%, %s%%\n' \
    "$(field "$sb_storage" server_cpu_percent)" "$(field "$sb_online" server_cpu_percent)" \
    "$(field "$redis_fanout" server_cpu_percent)" "$(field "$sb_storage" sbbench_cpu_percent)" \
    "$(field "$sb_online" sbbench_cpu_percent)" "$(field "$redis_fanout" sbbench_cpu_percent)"
done
