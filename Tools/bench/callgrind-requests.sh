#!/usr/bin/env bash
# The gateway's user-space instructions per request, counted by valgrind's callgrind: repeatable whatever else the
# machine is doing, unlike seconds (a shared machine's timings move by ±25%).
#
# For each workload it starts the release gateway under callgrind (no instrumentation until the warm-up is over), runs
# `sbbench requests` with `count` requests, dumps the counters, runs it again with twice as many and dumps again; the
# difference between the two dumps over `count` is the cost of one request with the connections' handshakes, the
# start-up and the shutdown taken out. Workloads, all at `depth` over `connections` connections:
#   - durable set: setUserMetadata, --durability commit (answered after its commit was synced), two event loops;
#   - ack-before-commit set: the same with --durability apply;
#   - get: getUserMetadata of a 3-item set (sbbench --op get after --op set3), --durability apply.
# The gateway runs from a copy of its binary without debug sections (valgrind 3.19 cannot read Swift 6.3's DWARF 5;
# function names come from the symbol table), and each dump is kept in `out` for callgrind_annotate.
# Usage: Tools/bench/callgrind-requests.sh [count] [depth] [connections] [out] [workloads]
#   count        requests in the first measured run (default 20000; the second runs twice as many)
#   depth        pipelining depth (default 16)
#   connections  client connections (default 10)
#   out          directory for the callgrind dumps (default a new temporary one, printed)
#   workloads    space-separated subset of "durable-set fast-set get" (default all three)
# Build first: swift build -c release --product switchboard && swift build -c release --product sbbench.
# SB_GATEWAY=path profiles another gateway binary (a saved build, for before/after counts); SB_BENCH=path drives it
# with another sbbench. Only the gateway is counted, but the client's speed changes how requests batch into reads
# and commits (a debug sbbench gave other totals): compare counts made with the same sbbench, over several runs.
set -euo pipefail
cd "$(dirname "$0")/../.."
count="${1:-20000}"
depth="${2:-16}"
connections="${3:-10}"
out="${4:-$(mktemp -d)}"
workloads="${5:-durable-set fast-set get}"
command -v valgrind >/dev/null || { echo "valgrind is needed (apt-get install valgrind)" >&2; exit 2; }
bin=.build/release
mkdir -p "$out"
objcopy --strip-debug "${SB_GATEWAY:-$bin/switchboard}" "$out/switchboard"
work=$(mktemp -d)
port=17430
trap 'kill $(jobs -p) 2>/dev/null || true; rm -rf "$work"' EXIT
# valgrind 3.19's rt_sigsuspend writes into the mask it is given, and libdispatch (the async main's dispatch_main)
# passes one in read-only memory: valgrind dies of SIGSEGV. This preloaded sigsuspend passes a copy on the stack.
cat >"$work/sigsuspend.c" <<'SHIM'
#define _GNU_SOURCE
#include <signal.h>
#include <sys/syscall.h>
#include <unistd.h>
int sigsuspend(const sigset_t *mask) {
    sigset_t copy = *mask;
    return (int)syscall(SYS_rt_sigsuspend, &copy, _NSIG / 8);
}
SHIM
cc -shared -fPIC -O2 -o "$work/sigsuspend.so" "$work/sigsuspend.c"

total_ir() {  # $1 callgrind dump: its total instruction count
  awk '/^(summary|totals):/ { print $2; exit }' "$1"
}

run_workload() {  # $1 name, $2 durability, $3 sbbench op
  rm -f "$work"/sb.sqlite*
  LD_PRELOAD="$work/sigsuspend.so" valgrind --tool=callgrind --instr-atstart=no --callgrind-out-file="$out/$1.%p" \
    "$out/switchboard" --tcp 127.0.0.1:$port --unix-socket off --database "$work/sb.sqlite" --durability "$2" \
    --threads 2 --rate-limit 0 --log-level error 2>"$out/$1.valgrind.log" &
  local pid=$!
  for _ in $(seq 600); do (exec 3<>/dev/tcp/127.0.0.1/$port) 2>/dev/null && break; sleep 0.1; done
  local bench=("${SB_BENCH:-$bin/sbbench}" requests --tcp 127.0.0.1:$port --connections "$connections" --depth "$depth")
  if [ "$3" = get ]; then "${bench[@]}" --depth 1 --op set3 --count 500 >/dev/null; fi
  # Warm-up (first allocations, SQLite's pages), not counted.
  "${bench[@]}" --op "$3" --count "$count" >/dev/null
  callgrind_control -i on "$pid" >/dev/null 2>&1
  "${bench[@]}" --op "$3" --count "$count" >"$out/$1.report1"
  callgrind_control -d "$1-1" "$pid" >/dev/null 2>&1
  "${bench[@]}" --op "$3" --count $((count * 2)) >"$out/$1.report2"
  callgrind_control -d "$1-2" "$pid" >/dev/null 2>&1
  kill -INT "$pid"; wait "$pid" 2>/dev/null || true
  local first="$out/$1.$pid.1" second="$out/$1.$pid.2"
  [ -s "$first" ] && [ -s "$second" ] || { echo "$1: no callgrind dumps (see $out/$1.valgrind.log)" >&2; return 1; }
  local i1 i2
  i1=$(total_ir "$first"); i2=$(total_ir "$second")
  printf '  %-22s %8d instructions/request  (%d requests: %d; %d requests: %d; dumps %s, %s)\n' \
    "$1" $(((i2 - i1) / count)) "$count" "$i1" $((count * 2)) "$i2" "$(basename "$first")" "$(basename "$second")"
}

echo "callgrind, depth $depth, $connections connections, two event loops, dumps in $out"
for workload in $workloads; do
  case "$workload" in
    durable-set) run_workload durable-set commit set ;;
    fast-set) run_workload fast-set apply set ;;
    get) run_workload get apply get ;;
    *) echo "unknown workload $workload" >&2; exit 2 ;;
  esac
done
