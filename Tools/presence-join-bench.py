#!/usr/bin/env python3
"""Join latency with webhooks (Docs/webhooks.md, "Answered once written"): a gateway with --webhooks whose endpoint
wants the joins or none of them, one client joining and leaving channels one after another (each join a
`subscribeChannel`, answered once its presence.join is in the outbox when wanted; only the joins are timed); prints
the answer's latency percentiles for both. A threaded receiver in this process answers 204 at once.

    PYTHONPATH=clients/python/src python3 Tools/presence-join-bench.py --binary .build/release/switchboard [--joins 2000]

Both sides share the machine with the gateway: say so when you quote the figures. Standard library and the Python
client only.
"""
import argparse
import asyncio
import base64
import http.server
import json
import os
import re
import shutil
import subprocess
import tempfile
import threading
import time

from switchboard import Client


class Receiver(http.server.BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"

    def do_POST(self):
        self.rfile.read(int(self.headers["content-length"]))
        self.send_response(204)
        self.send_header("content-length", "0")
        self.end_headers()

    def log_message(self, *args):
        pass


def percentile(values, p):
    values = sorted(values)
    return values[min(len(values) - 1, int(len(values) * p))]


async def joins(endpoint, count):
    latencies = []
    async with Client(endpoint, "joiner") as client:
        for n in range(count):
            start = time.perf_counter()
            await client.subscribe_channel("room.%d" % (n % 40))
            latencies.append((time.perf_counter() - start) * 1000)
            await client.unsubscribe_channel("room.%d" % (n % 40))  # a user is in 50 channels at most
    return latencies


def run(binary, wanted, count):
    receiver = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Receiver)
    threading.Thread(target=receiver.serve_forever, daemon=True).start()
    directory = tempfile.mkdtemp(prefix="sb-join-bench")
    config = os.path.join(directory, "webhooks.json")
    with open(config, "w") as f:
        json.dump({"endpoints": [{
            "name": "app", "url": "http://127.0.0.1:%d/hooks" % receiver.server_address[1],
            "secrets": ["whsec_" + base64.b64encode(b"join-bench-secret-0123456789abcd").decode()],
            "channels": ["room.*" if wanted else "nothing"], "kinds": ["presence"]}]}, f)
    log = open(os.path.join(directory, "gateway.log"), "w+")
    gateway = subprocess.Popen(
        [binary, "--tcp", "127.0.0.1:0", "--unix-socket", "off", "--database", os.path.join(directory, "db.sqlite"),
         "--webhooks", config], stderr=log, stdout=log)
    try:
        port = None
        for _ in range(600):
            log.seek(0)
            found = re.search(r"tcp=\S*:(\d+) .*switchboard listening", log.read())
            if found:
                port = int(found.group(1))
                break
            time.sleep(0.05)
        latencies = asyncio.run(joins("127.0.0.1:%d" % port, count))
    finally:
        gateway.terminate()
        gateway.wait()
        receiver.shutdown()
        shutil.rmtree(directory, ignore_errors=True)
    return latencies


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--binary", required=True)
    parser.add_argument("--joins", type=int, default=2000)
    args = parser.parse_args()
    for wanted in (False, True):
        latencies = run(args.binary, wanted, args.joins)
        print("joins %s by the endpoint: %d, latency ms p50 %.2f  p90 %.2f  p99 %.2f  max %.2f" % (
            "wanted" if wanted else "not wanted", len(latencies), percentile(latencies, 0.5),
            percentile(latencies, 0.9), percentile(latencies, 0.99), max(latencies)))


if __name__ == "__main__":
    main()
