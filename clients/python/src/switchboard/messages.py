"""Received bodies with every field present: the canonical JSON rendering omits defaults (SPEC 10); the client's
dicts hold them, so `response["majorRevision"]` works whatever the server left out."""
from __future__ import annotations

from typing import Any, Dict, List

from . import wire


def default_rendering(f: wire.Field) -> Any:
    """The JSON value of an absent field: its default, an enum's by name, a missing struct as None."""
    value = wire.default_of(f)
    if f["type"] in wire.ENUMS and not f.get("repeated"):
        return wire.ENUM_NAMES[f["type"]].get(value, value)
    return value


def with_defaults(fields: List[wire.Field], body: Dict[str, Any]) -> Dict[str, Any]:
    """A copy of a decoded body (canonical rendering) with every field of `fields` present, structs too."""
    out: Dict[str, Any] = {}
    for f in fields:
        name, t = f["name"], f["type"]
        if name not in body:
            out[name] = default_rendering(f)
        elif t in wire.STRUCTS:
            sub = wire.STRUCTS[t]
            value = body[name]
            out[name] = [with_defaults(sub, x) for x in value] if f.get("repeated") else with_defaults(sub, value)
        else:
            out[name] = body[name]
    return out
