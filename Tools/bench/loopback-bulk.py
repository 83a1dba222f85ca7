#!/usr/bin/env python3
"""Loopback TCP bulk traffic without a gateway: a sender writes 90 MB bursts, at most two per second, to a sink in
the same process (the volume of `sbbench big-reads`' answers). Run it beside `sbbench requests` to see what the
machine's loopback alone does to other clients' latency.

Usage: Tools/bench/loopback-bulk.py SECONDS [PORT]
"""
import socket
import sys
import threading
import time

seconds = float(sys.argv[1])
port = int(sys.argv[2]) if len(sys.argv) > 2 else 7499
server = socket.socket()
server.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
server.bind(("127.0.0.1", port))
server.listen(1)


def sink():
    connection, _ = server.accept()
    while connection.recv(1 << 20):
        pass


threading.Thread(target=sink, daemon=True).start()
sender = socket.create_connection(("127.0.0.1", port))
burst = b"x" * (90 << 20)
end = time.time() + seconds
while time.time() < end:
    started = time.time()
    sender.sendall(burst)
    elapsed = time.time() - started
    if elapsed < 0.5:
        time.sleep(0.5 - elapsed)
