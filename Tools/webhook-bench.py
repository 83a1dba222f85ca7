#!/usr/bin/env python3
"""Webhook delivery latency (Docs/webhooks.md): a gateway with --webhooks and --api, storage writes at a fixed rate
through the HTTP API (each one storage.set webhook), and a receiver measuring, per event, the time from the event's
`timestamp` (when the gateway decided it) to its arrival; prints the percentiles.

    python3 Tools/webhook-bench.py --binary .build/release/switchboard [--rate 1000] [--seconds 10] [--channels 100]
        [--cluster postgres://user@host:port/db]

Open loop: a sender paces `rate` requests per second over keep-alive connections (4 processes), whatever the answers
take. The receiver is a threaded HTTP server in this process answering 204 at once and checking each signature. Both
share the machine with the gateway: say so when you quote the figures. Standard library only.
"""
import argparse
import base64
import hashlib
import hmac
import http.server
import json
import multiprocessing
import os
import re
import socket
import subprocess
import tempfile
import threading
import time

SECRET_BYTES = b"webhook-bench-secret-0123456789ab"
SECRET = "whsec_" + base64.b64encode(SECRET_BYTES).decode()
KEY = "sk_bench_0123456789abcdefghij"


class Receiver(http.server.BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    latencies = []
    ids = set()
    bad_signatures = 0
    lock = threading.Lock()

    def do_POST(self):
        arrived = time.time() * 1000
        body = self.rfile.read(int(self.headers["content-length"]))
        self.send_response(204)
        self.send_header("content-length", "0")
        self.end_headers()
        event = json.loads(body)
        signed = "%s.%s.%s" % (self.headers["webhook-id"], self.headers["webhook-timestamp"], body.decode())
        expected = base64.b64encode(hmac.new(SECRET_BYTES, signed.encode(), hashlib.sha256).digest()).decode()
        ok = ("v1," + expected) in self.headers["webhook-signature"].split(" ")
        with Receiver.lock:
            if not ok:
                Receiver.bad_signatures += 1
            if event["id"] not in Receiver.ids:
                Receiver.ids.add(event["id"])
                Receiver.latencies.append(arrived - event["timestamp"])

    def log_message(self, *args):
        pass


def sender(args):
    port, index, processes, rate, seconds, channels, start = args
    sock = socket.create_connection(("127.0.0.1", port))
    sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    per_process = rate / processes
    count = int(per_process * seconds)
    reader = threading.Thread(target=drain, args=(sock, count), daemon=True)
    reader.start()
    while time.time() < start:
        time.sleep(0.001)
    for n in range(count):
        due = start + n / per_process
        delay = due - time.time()
        if delay > 0:
            time.sleep(delay)
        channel = "bench-%d" % ((n * processes + index) % channels)
        data = json.dumps({"channel": channel, "items": [{"key": "k", "value": str(n)}]}).encode()
        sock.sendall(("POST /v1/setChannelMetadata HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer %s\r\n"
                      "Content-Type: application/json\r\nContent-Length: %d\r\n\r\n" % (KEY, len(data))).encode() + data)
    reader.join(60)
    return count


def drain(sock, count):
    buffer = b""
    answered = 0
    while answered < count:
        chunk = sock.recv(65536)
        if not chunk:
            return
        buffer += chunk
        while True:
            end = buffer.find(b"\r\n\r\n")
            if end < 0:
                break
            match = re.search(rb"content-length: *(\d+)", buffer[:end], re.I)
            total = end + 4 + (int(match.group(1)) if match else 0)
            if len(buffer) < total:
                break
            buffer = buffer[total:]
            answered += 1


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--binary", required=True)
    parser.add_argument("--rate", type=int, default=1000)
    parser.add_argument("--seconds", type=int, default=10)
    parser.add_argument("--channels", type=int, default=100)
    parser.add_argument("--processes", type=int, default=4)
    parser.add_argument("--cluster", help="a PostgreSQL URL: the gateway runs as a node of that cluster, with its "
                        "shared webhook outbox in PostgreSQL")
    args = parser.parse_args()

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Receiver)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    workdir = tempfile.mkdtemp(prefix="sb-webhook-bench-")
    config = os.path.join(workdir, "webhooks.json")
    with open(config, "w") as f:
        json.dump({"node": "bench", "endpoints": [{
            "name": "bench", "url": "http://127.0.0.1:%d/hooks" % server.server_address[1], "secrets": [SECRET],
            "kinds": ["storage"]}]}, f)
    keys = os.path.join(workdir, "keys")
    with open(keys, "w") as f:
        f.write("bench %s\n" % KEY)
    api_port = free_port()
    gateway = subprocess.Popen(
        [args.binary, "--tcp", "127.0.0.1:0", "--unix-socket", "off", "--database", os.path.join(workdir, "db.sqlite"),
         "--api", "127.0.0.1:%d" % api_port, "--api-key-file", keys, "--webhooks", config, "--log-level", "warning"]
        + (["--cluster", args.cluster] if args.cluster else []),
        env={k: v for k, v in os.environ.items() if not k.startswith("SWITCHBOARD_")})
    try:
        deadline = time.time() + 30
        while time.time() < deadline:
            try:
                socket.create_connection(("127.0.0.1", api_port), timeout=1).close()
                break
            except OSError:
                time.sleep(0.05)
        start = time.time() + 1
        with multiprocessing.Pool(args.processes) as pool:
            sent = sum(pool.map(sender, [(api_port, i, args.processes, args.rate, args.seconds, args.channels, start)
                                         for i in range(args.processes)]))
        deadline = time.time() + 30
        while time.time() < deadline and len(Receiver.ids) < sent:
            time.sleep(0.05)
    finally:
        gateway.terminate()
        gateway.wait(30)
        server.shutdown()
    latencies = sorted(Receiver.latencies)
    if not latencies:
        raise SystemExit("no webhook arrived")

    def pct(p):
        return latencies[min(len(latencies) - 1, int(len(latencies) * p / 100))]

    print("events sent %d, delivered %d (unique ids), bad signatures %d, at %d/s over %d s, %d channels" % (
        sent, len(Receiver.ids), Receiver.bad_signatures, args.rate, args.seconds, args.channels))
    print("delivery latency ms: p50 %.1f  p90 %.1f  p99 %.1f  max %.1f" % (pct(50), pct(90), pct(99), latencies[-1]))


if __name__ == "__main__":
    main()
