#!/usr/bin/env python3
"""Load for the HTTP API (Docs/http-api.md): requests/s and latency percentiles of setChannelMetadata and
getChannelMetadata, from closed-loop workers on keep-alive connections.

    python3 Tools/api-bench.py --url http://127.0.0.1:7480 --key SECRET [--workers 4] [--seconds 10]

Each worker is a process with one connection that sends a request, reads the whole answer, and sends the next, for
--seconds per operation (after a 1 s warm-up): set writes one 16-byte item to one of 1,000 channels, get reads one of
them back. Requests are prebuilt bytes and answers are read by Content-Length, so the client costs little; on a
small machine it still shares the cores with the gateway (say so when you quote the figures). Standard library only.
"""
import argparse
import json
import multiprocessing
import socket
import time
import urllib.parse


def build(host, path, key, body):
    data = json.dumps(body, separators=(",", ":")).encode()
    head = ("POST %s HTTP/1.1\r\nHost: %s\r\nAuthorization: Bearer %s\r\nContent-Type: application/json\r\n"
            "Content-Length: %d\r\n\r\n" % (path, host, key, len(data))).encode()
    return head + data


def read_answer(sock, buffer):
    """Reads one HTTP/1.1 answer (Content-Length framed) from sock; returns (status, rest of the buffer)."""
    while True:
        end = buffer.find(b"\r\n\r\n")
        if end >= 0:
            head = buffer[:end].decode("latin-1")
            length = 0
            for line in head.split("\r\n")[1:]:
                name, _, value = line.partition(":")
                if name.strip().lower() == "content-length":
                    length = int(value.strip())
            total = end + 4 + length
            while len(buffer) < total:
                chunk = sock.recv(65536)
                if not chunk:
                    raise ConnectionError("closed mid-answer")
                buffer += chunk
            return int(head.split(" ", 2)[1]), buffer[total:]
        chunk = sock.recv(65536)
        if not chunk:
            raise ConnectionError("closed before an answer")
        buffer += chunk


def worker(args):
    url, key, op, index, warmup, seconds = args
    parsed = urllib.parse.urlparse(url)
    host = parsed.hostname
    port = parsed.port
    requests = []
    for n in range(64):
        channel = "bench-%d" % ((index * 64 + n) % 1000)
        if op == "set":
            body = {"channel": channel, "items": [{"key": "k", "value": "v" * 16}]}
            requests.append(build(host, "/v1/setChannelMetadata", key, body))
        else:
            requests.append(build(host, "/v1/getChannelMetadata", key, {"channel": channel}))
    sock = socket.create_connection((host, port))
    sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    buffer = b""
    latencies = []
    failures = 0
    start = time.perf_counter()
    measure_from = start + warmup
    stop = measure_from + seconds
    n = 0
    while True:
        sent = time.perf_counter()
        if sent >= stop:
            break
        sock.sendall(requests[n % len(requests)])
        status, buffer = read_answer(sock, buffer)
        done = time.perf_counter()
        if sent >= measure_from:
            latencies.append(done - sent)
            if status != 200:
                failures += 1
        n += 1
    sock.close()
    return latencies, failures


def run(url, key, op, workers, seconds):
    with multiprocessing.Pool(workers) as pool:
        results = pool.map(worker, [(url, key, op, i, 1.0, seconds) for i in range(workers)])
    latencies = sorted(l for result in results for l in result[0])
    failures = sum(result[1] for result in results)

    def pct(p):
        return latencies[min(len(latencies) - 1, int(p * len(latencies)))] * 1000

    print("%-4s workers=%d requests=%d failures=%d rps=%.0f p50=%.2fms p99=%.2fms p99.9=%.2fms max=%.2fms" % (
        op, workers, len(latencies), failures, len(latencies) / seconds, pct(0.50), pct(0.99), pct(0.999),
        latencies[-1] * 1000))
    return failures


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--url", required=True, help="the API's base URL, http://HOST:PORT")
    parser.add_argument("--key", required=True, help="an API key's secret (or an admin token)")
    parser.add_argument("--workers", type=int, default=4)
    parser.add_argument("--seconds", type=float, default=10.0)
    parser.add_argument("--ops", default="set,get", help="set, get or both, comma-separated")
    args = parser.parse_args()
    failures = 0
    for op in args.ops.split(","):
        failures += run(args.url, args.key, op, args.workers, args.seconds)
    raise SystemExit(1 if failures else 0)


if __name__ == "__main__":
    main()
