#!/usr/bin/env bash
# Builds the libFuzzer harness (Tools/fuzz/sbfuzz) with the fuzzer and address sanitizers and runs it for N seconds.
# Usage: Tools/fuzz/run.sh [seconds]    The corpus starts from the Protocol/vectors frames and lives in .build-fuzz/corpus.
set -euo pipefail
cd "$(dirname "$0")/../.."
seconds="${1:-60}"
scratch=.build-fuzz
swift build --scratch-path "$scratch" --product sbfuzz \
  -Xswiftc -sanitize=fuzzer,address -Xswiftc -DFUZZING 2>&1 | grep -v '^\[' || true
binary="$scratch/debug/sbfuzz"
[ -x "$binary" ] || { echo "fuzz build failed"; exit 1; }
corpus="$scratch/corpus"
mkdir -p "$corpus"
# Seed the corpus with every frame of the spec's vectors.
python3 - "$corpus" <<'PY'
import glob, json, os, sys
out = sys.argv[1]
for path in glob.glob("Protocol/vectors/*.json"):
    for i, v in enumerate(json.load(open(path)).get("vectors", [])):
        if "hex" in v:
            open(os.path.join(out, "%s-%d" % (os.path.basename(path), i)), "wb").write(bytes.fromhex(v["hex"]))
PY
echo "fuzzing the frame decoder for ${seconds}s ($(ls "$corpus" | wc -l) corpus files)"
"$binary" "$corpus" -max_total_time="$seconds" -max_len=4096 -timeout=10 -rss_limit_mb=2048 \
  -artifact_prefix="$scratch/" -print_final_stats=1 2>&1 | tail -n 25
