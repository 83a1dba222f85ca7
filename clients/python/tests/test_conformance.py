"""Every live scenario of Protocol/conformance/scenarios.json, each against a gateway of its own."""
from __future__ import annotations

import asyncio
from typing import Any, Dict

import pytest

import conformance

DOCUMENT = conformance.load()
SCENARIOS = DOCUMENT["scenarios"]


def test_scenarios_cover_the_areas_the_list_promises() -> None:
    names = {s["name"] for s in SCENARIOS}
    assert {"login.open.tcp", "login.open.unix", "login.token", "storage.revisions", "locks", "presence", "events",
            "profiles", "compression.push", "reconnect.resubscribe", "errors", "logout.goaway"} <= names


@pytest.mark.parametrize("scenario", SCENARIOS, ids=[s["name"] for s in SCENARIOS])
def test_scenario(scenario: Dict[str, Any]) -> None:
    asyncio.run(asyncio.wait_for(conformance.Runner(DOCUMENT, scenario).run(), 90))


def test_matching_rules() -> None:
    conformance.matches({"a": 1, "b": [{"c": "$any"}]}, {"a": 1, "b": [{"c": 0, "d": 2}], "e": 3})
    for expected, actual in [({"a": 1}, {"a": 2}), ({"a": 1}, {}), ([1], [1, 2]), ({"a": True}, {"a": 1}),
                             ({"a": "$any"}, {})]:
        with pytest.raises(conformance.Mismatch):
            conformance.matches(expected, actual)
