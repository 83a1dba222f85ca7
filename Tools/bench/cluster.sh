#!/usr/bin/env bash
# Cluster figures on this machine: three release gateways sharing one PostgreSQL server of the script's own (initdb in
# a temporary directory, loopback only), and sbbench against them:
#   - cross-node latency: subscribers on node 2 follow a user's metadata, the writer writes through node 1
#     (sbbench storage-fanout --writer-tcp), one event at a time;
#   - durable write throughput: one sbbench requests --op set per node at once, summed (every write is committed in
#     PostgreSQL before it is answered).
# With REDIS=1 the nodes also share a redis-server of the script's own (--redis), which relays committed changes.
# Usage: [REDIS=1] Tools/bench/cluster.sh [writes-per-node] [subscribers] [events]
set -euo pipefail
cd "$(dirname "$0")/../.."
writes="${1:-100000}"
subscribers="${2:-100}"
events="${3:-200}"
bin_dir=$(ls -d /usr/lib/postgresql/*/bin | sort -V | tail -1)
swift build -c release --product switchboard >/dev/null
swift build -c release --product sbbench >/dev/null
bin=".build/release"
work=$(mktemp -d)
trap 'kill $(jobs -p) 2>/dev/null || true; sleep 0.5; rm -rf "$work"' EXIT
as_postgres() { if [ "$(id -u)" -eq 0 ]; then setpriv --reuid=postgres --regid=postgres --init-groups -- "$@"; else "$@"; fi; }
[ "$(id -u)" -eq 0 ] && chown postgres "$work"
pg_port=$((20000 + RANDOM % 10000))
as_postgres "$bin_dir/initdb" -D "$work/data" -A trust -U switchboard -E UTF8 >/dev/null
as_postgres "$bin_dir/postgres" -D "$work/data" -p "$pg_port" -k "$work" -c listen_addresses=127.0.0.1 \
  -c max_connections=200 -c shared_buffers=256MB >"$work/pg.log" 2>&1 &
for _ in $(seq 100); do pg_isready -q -h 127.0.0.1 -p "$pg_port" && break; sleep 0.1; done
url="postgres://switchboard@127.0.0.1:$pg_port/postgres"
redis_args=()
if [ "${REDIS:-0}" = 1 ]; then
  redis_port=$((pg_port + 1))
  redis-server --port "$redis_port" --bind 127.0.0.1 --dir "$work" --save "" --appendonly no --logfile "$work/redis.log" &
  for _ in $(seq 100); do redis-cli -p "$redis_port" ping >/dev/null 2>&1 && break; sleep 0.1; done
  redis_args=(--redis "127.0.0.1:$redis_port")
  echo "with Redis at 127.0.0.1:$redis_port"
fi
ports=(17411 17412 17413)
pids=()
for n in 0 1 2; do
  $bin/switchboard --cluster "$url" "${redis_args[@]}" --tcp "127.0.0.1:${ports[$n]}" --unix-socket off --database "$work/node$n.sqlite" \
    --rate-limit 0 --log-level error &
  pids+=($!)
done
for port in "${ports[@]}"; do
  for _ in $(seq 200); do (exec 3<>/dev/tcp/127.0.0.1/$port) 2>/dev/null && break; sleep 0.05; done
done
echo "cross-node storage event latency ($subscribers subscribers on node 2, writer on node 1, $events events):"
$bin/sbbench storage-fanout --tcp "127.0.0.1:${ports[1]}" --writer-tcp "127.0.0.1:${ports[0]}" \
  --subscribers "$subscribers" --events "$events" --server-pid "${pids[1]}" \
  | grep -E "^(delivery_p50_us|delivery_p99_us|delivery_max_us|last_delivery_p99_us|deliveries|lost|duplicates|server_cpu)"
echo "durable writes across the cluster (sbbench requests --op set, 50 connections x depth 16 per node, $writes each):"
loaders=()
for n in 0 1 2; do
  $bin/sbbench requests --tcp "127.0.0.1:${ports[$n]}" --connections 50 --depth 16 --op set --count "$writes" \
    >"$work/rate$n.txt" &
  loaders+=($!)
done
wait "${loaders[@]}" || true
total=0
for n in 0 1 2; do
  rate=$(awk -F': ' '$1 == "requests_per_second" { print $2 }' "$work/rate$n.txt")
  errors=$(awk -F': ' '$1 == "error_responses" { print $2 }' "$work/rate$n.txt")
  echo "  node $n: ${rate:-?} writes/s (errors ${errors:-?})"
  total=$(awk -v a="$total" -v b="${rate:-0}" 'BEGIN { printf "%.0f", a + b }')
done
echo "  cluster: $total writes/s"
