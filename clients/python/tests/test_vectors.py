"""The protocol's test vectors (Protocol/vectors) through the package's codec, one test per vector."""
from __future__ import annotations

import os
from typing import Any, Dict

import pytest

from switchboard import wire

VECTORS = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "..", "Protocol", "vectors")
ALL = [(name, v) for name, vectors in wire.vector_files(VECTORS) for v in vectors]


def test_every_vector_file_is_read() -> None:
    names = {name for name, _ in ALL}
    assert {"frames.json", "compressed.json", "streams.json", "malformed.json", "unknown.json"} <= names
    assert len(ALL) > 300


@pytest.mark.parametrize("name,vector", ALL, ids=["%s:%s" % (n, v["name"]) for n, v in ALL])
def test_vector_holds_both_ways(name: str, vector: Dict[str, Any]) -> None:
    assert wire.check_vector(vector) is None


def test_package_schema_is_the_protocol_schema() -> None:
    with open(os.path.join(VECTORS, "..", "schema.json"), encoding="utf-8") as f:
        assert f.read() == open(os.path.join(wire.HERE, "schema.json"), encoding="utf-8").read()
