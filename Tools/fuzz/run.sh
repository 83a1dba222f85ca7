#!/usr/bin/env bash
# Builds the libFuzzer harness (Tools/fuzz/sbfuzz) with the fuzzer and address sanitizers and runs it.
# Usage: Tools/fuzz/run.sh [seconds] [decoder|handlers|token|all]
#   decoder   the frame decoder and message codec; corpus .build-fuzz/corpus
#   handlers  the request handlers behind a connection (ConnectionHandler with every area over SQLite stores);
#             corpus .build-fuzz/corpus-handlers
#   token     login token verification (JWT parser, key and algorithm checks, claims); corpus .build-fuzz/corpus-token
#   all       all three, the seconds split between them (the default)
# The frame corpora start from the Protocol/vectors frames, the token corpus from a few tokens and claims; crashes
# are written to .build-fuzz/<target>-crash-*.
set -euo pipefail
cd "$(dirname "$0")/../.."
seconds="${1:-60}"
target="${2:-all}"
case "$target" in
  decoder|handlers|token) targets=("$target"); each="$seconds" ;;
  all) targets=(decoder handlers token); each=$(( (seconds + 2) / 3 )) ;;
  *) echo "usage: $0 [seconds] [decoder|handlers|token|all]"; exit 2 ;;
esac
scratch=.build-fuzz
swift build --scratch-path "$scratch" --product sbfuzz \
  -Xswiftc -sanitize=fuzzer,address -Xswiftc -DFUZZING 2>&1 | grep -v '^\[' || true
binary="$scratch/debug/sbfuzz"
[ -x "$binary" ] || { echo "fuzz build failed"; exit 1; }

# Seeds a corpus from the spec's vectors: every frame for the decoder; for the handlers every frame a client sends
# (requests and control frames), one per file and all of a vector file's in one, behind the read-size byte (0: one read).
seed_corpus() {
  python3 - "$1" "$2" <<'PY'
import glob, json, os, sys
out, target = sys.argv[1], sys.argv[2]
if target == "token":
    # Claims (the target also signs its input as claims) and whole tokens: HS256 without kid, HS384 under kid h.
    import base64, hashlib, hmac
    b64 = lambda raw: base64.urlsafe_b64encode(raw).rstrip(b"=").decode()
    claims = [
        '{"sub":"ann","exp":1900000000}',
        '{"sub":"ann","exp":1900000000.5,"nbf":1799999990,"iat":1799999000,"jti":"j-1","role":"admin"}',
        '{"sub":"ann","exp":1900000000,"grants":[{"on":"message:room:*","allow":["read","write"]},{"on":"user:{user}","allow":["presence"]}]}',
        '{"sub":"","exp":"soon","role":5,"grants":{}}',
    ]
    secrets = {None: b"the-fuzzer's-token-secret-of-64-bytes-for-HS256-HS384-and-HS512!",
               "h": b"a-second-hmac-key-of-at-least-32-bytes"}
    for i, c in enumerate(claims):
        open(os.path.join(out, "claims-%d" % i), "w").write(c)
        for kid, alg, digest in ((None, "HS256", hashlib.sha256), ("h", "HS256", hashlib.sha256)):
            header = {"alg": alg, "typ": "JWT"} if kid is None else {"alg": alg, "kid": kid}
            signing = b64(json.dumps(header).encode()) + "." + b64(c.encode())
            token = signing + "." + b64(hmac.new(secrets[kid], signing.encode(), digest).digest())
            open(os.path.join(out, "token-%d-%s" % (i, kid or "default")), "w").write(token)
    open(os.path.join(out, "alg-none"), "w").write(b64(b'{"alg":"none"}') + "." + b64(claims[0].encode()) + ".")
    sys.exit(0)
def client_frame(b):
    i = 0
    while i < len(b) and b[i] & 0x80: i += 1
    return i + 2 < len(b) and (b[i + 2] >> 6) in (0, 1)  # control or request class
for path in glob.glob("Protocol/vectors/*.json"):
    name = os.path.basename(path)
    frames = [bytes.fromhex(v["hex"]) for v in json.load(open(path)).get("vectors", []) if "hex" in v]
    if target == "decoder":
        for i, b in enumerate(frames):
            open(os.path.join(out, "%s-%d" % (name, i)), "wb").write(b)
        continue
    mine = [b for b in frames if client_frame(b)]
    for i, b in enumerate(mine):
        open(os.path.join(out, "%s-%d" % (name, i)), "wb").write(b"\x00" + b)
    if mine:
        open(os.path.join(out, "%s-all" % name), "wb").write(b"\x00" + b"".join(mine))
PY
}

status=0
for name in "${targets[@]}"; do
  corpus="$scratch/corpus"
  [ "$name" = decoder ] || corpus="$scratch/corpus-$name"
  mkdir -p "$corpus"
  seed_corpus "$corpus" "$name"
  # The handlers target keeps one gateway for every input: what its sessions leave behind on purpose (presence
  # timers, kept events, stored metadata) outlives an input and the process, which LeakSanitizer would report as leaks.
  leaks=1
  [ "$name" = handlers ] && leaks=0
  echo "fuzzing the $name target for ${each}s ($(ls "$corpus" | wc -l) corpus files)"
  # The handlers target's SQLite files live in the scratch directory (removed afterwards, however the run ended).
  ASAN_OPTIONS="detect_leaks=$leaks${ASAN_OPTIONS:+:$ASAN_OPTIONS}" SBFUZZ_TARGET="$name" \
    SBFUZZ_DIRECTORY="$PWD/$scratch/$name-databases" "$binary" "$corpus" -max_total_time="$each" -max_len=4096 -timeout=10 -rss_limit_mb=2048 \
    -detect_leaks="$leaks" -artifact_prefix="$scratch/$name-" -print_final_stats=1 >"$scratch/$name.log" 2>&1 || status=$?
  rm -rf "$scratch/$name-databases"
  tail -n 25 "$scratch/$name.log"
  [ "$status" = 0 ] || { echo "the $name target failed (exit $status); full log: $scratch/$name.log"; break; }
done
exit "$status"
