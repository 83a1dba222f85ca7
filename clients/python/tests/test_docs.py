"""Docs/python-client.md: its example is examples/quickstart.py, word for word, and runs against a live gateway;
the page's other Python blocks run too, in order, as one coroutine against a live gateway."""
from __future__ import annotations

import asyncio
import os
import re
import subprocess
import sys

from gateway import Gateway

HERE = os.path.dirname(os.path.abspath(__file__))
PACKAGE = os.path.join(HERE, "..")
DOC = os.path.join(PACKAGE, "..", "..", "Docs", "python-client.md")
EXAMPLE = os.path.join(PACKAGE, "examples", "quickstart.py")


def python_blocks() -> list[str]:
    with open(DOC, encoding="utf-8") as f:
        return re.findall(r"```python\n(.*?)```", f.read(), re.S)


def test_the_doc_shows_the_example_file_word_for_word() -> None:
    with open(EXAMPLE, encoding="utf-8") as f:
        example = f.read()
    assert python_blocks()[0] == example
    assert len(example.strip().splitlines()) <= 13


def test_the_example_runs_against_a_live_gateway(open_gateway: Gateway) -> None:
    for endpoint in (open_gateway.tcp, open_gateway.unix):
        done = subprocess.run([sys.executable, EXAMPLE, endpoint], capture_output=True, text=True, timeout=60,
                              env=dict(os.environ, PYTHONPATH=os.path.join(PACKAGE, "src")))
        assert done.returncode == 0, done.stderr
        assert done.stdout == "tony set news\n"


def test_the_other_blocks_of_the_doc_run_in_order(open_gateway: Gateway) -> None:
    blocks = python_blocks()[1:]
    assert len(blocks) >= 5
    source = "async def blocks(endpoint):\n" + "".join(
        "    " + line + "\n" for block in blocks for line in block.splitlines())
    namespace: dict[str, object] = {}
    exec(compile(source, DOC, "exec"), namespace)
    asyncio.run(asyncio.wait_for(namespace["blocks"](open_gateway.tcp), 90))  # type: ignore[operator]
