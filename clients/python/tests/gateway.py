"""A live gateway for the tests: the real `switchboard` binary on a free loopback port and a temporary Unix socket,
in open development mode or with a token secret, stopped (and its files removed) afterwards.

The binary is $SWITCHBOARD_BINARY, else the repository's .build/debug/switchboard (the Makefile builds it before the
Python tests run). A missing binary fails the tests: they never skip.
"""
from __future__ import annotations

import os
import shutil
import signal
import socket
import subprocess
import tempfile
import time
from typing import List, Optional

import pytest

REPO = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", "..", ".."))
SECRET = "python-client-tests-secret-0123456789abcdef"


def binary() -> str:
    path = os.environ.get("SWITCHBOARD_BINARY") or os.path.join(REPO, ".build", "debug", "switchboard")
    if not os.access(path, os.X_OK):
        pytest.fail("no switchboard binary at %s: build it (swift build --product switchboard) or set "
                    "SWITCHBOARD_BINARY" % path, pytrace=False)
    return path


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


class Gateway:
    """One gateway process. `start()`, `stop()` (SIGTERM: the server sends GOAWAY 8002), `restart()` on the same
    port, socket and database, `token(user)` minted by `switchboard token` with the gateway's secret."""

    def __init__(self, secret: Optional[str] = None, extra: Optional[List[str]] = None) -> None:
        self.binary = binary()
        self.secret = secret
        self.extra = extra or []
        self.dir = tempfile.mkdtemp(prefix="sbpy")             # short: a Unix socket path is at most 107 bytes
        self.port = free_port()
        self.socket = os.path.join(self.dir, "gw.sock")
        self.database = os.path.join(self.dir, "gw.sqlite")
        self.log_path = os.path.join(self.dir, "gw.log")
        self.process: Optional[subprocess.Popen[bytes]] = None

    @property
    def tcp(self) -> str:
        return "127.0.0.1:%d" % self.port

    @property
    def unix(self) -> str:
        return "unix:" + self.socket

    def endpoint(self, transport: str) -> str:
        return self.unix if transport == "unix" else self.tcp

    def start(self) -> "Gateway":
        args = [self.binary, "--tcp", self.tcp, "--unix-socket", self.socket, "--database", self.database,
                "--shutdown-grace-ms", "300", "--log-level", "info"] + self.extra
        if self.secret is not None:
            args += ["--token-secret", self.secret]
        log = open(self.log_path, "ab")
        self.process = subprocess.Popen(args, stdout=log, stderr=subprocess.STDOUT, cwd=self.dir)
        log.close()
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                pytest.fail("the gateway exited with %s:\n%s" % (self.process.returncode, self.log()), pytrace=False)
            # The socket file exists from bind(), before listen(): started means both listeners accept.
            if os.path.exists(self.socket):
                try:
                    with socket.create_connection(("127.0.0.1", self.port), timeout=1):
                        pass
                    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as probe:
                        probe.settimeout(1)
                        probe.connect(self.socket)
                    return self
                except OSError:
                    pass
            time.sleep(0.05)
        self.stop()
        pytest.fail("the gateway did not listen within 30 s:\n" + self.log(), pytrace=False)

    def stop(self) -> None:
        process, self.process = self.process, None
        if process is None or process.poll() is not None:
            return
        process.send_signal(signal.SIGTERM)
        try:
            process.wait(15)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait(5)

    def restart(self) -> None:
        self.stop()
        self.start()

    def token(self, user: str, admin: bool = False, ttl: str = "1h") -> str:
        assert self.secret is not None, "open development mode has no tokens"
        args = [self.binary, "token", "--token-secret", self.secret, "--user", user, "--ttl", ttl]
        if admin:
            args.append("--admin")
        done = subprocess.run(args, capture_output=True, text=True, timeout=30)
        if done.returncode != 0:
            pytest.fail("switchboard token failed: %s" % done.stderr, pytrace=False)
        return done.stdout.strip()

    def log(self) -> str:
        try:
            with open(self.log_path, encoding="utf-8", errors="replace") as f:
                return f.read()[-4000:]
        except OSError:
            return ""

    def remove(self) -> None:
        self.stop()
        shutil.rmtree(self.dir, ignore_errors=True)
