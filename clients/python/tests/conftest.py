"""Fixtures: the package from this source tree, and live gateways (tests/gateway.py) started and stopped here."""
from __future__ import annotations

import os
import sys
from typing import Any, Generator, Iterator

import pytest

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "src"))            # the source tree, not an installed copy
sys.path.insert(0, HERE)

from gateway import SECRET, Gateway  # noqa: E402


@pytest.fixture(scope="module")
def open_gateway() -> Iterator[Gateway]:
    """A gateway in open development mode (any user id, admin role), shared by a module's tests."""
    gateway = Gateway().start()
    yield gateway
    gateway.remove()


@pytest.fixture(scope="module")
def token_gateway() -> Iterator[Gateway]:
    """A gateway that requires tokens (minted with `switchboard token` and its secret)."""
    gateway = Gateway(secret=SECRET).start()
    yield gateway
    gateway.remove()


@pytest.fixture
def fresh_gateway() -> Iterator[Gateway]:
    """A gateway of the test's own, for tests that restart or stop it."""
    gateway = Gateway().start()
    yield gateway
    gateway.remove()


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: Any) -> Generator[None, Any, None]:
    """A skipped test fails the run: these tests never skip (a missing gateway binary is a failure too)."""
    outcome = yield
    report = outcome.get_result()
    if report.skipped:
        report.outcome = "failed"
        report.longrepr = "%s was skipped (%s): the Python client's tests may not skip" % (item.nodeid, report.longrepr)
