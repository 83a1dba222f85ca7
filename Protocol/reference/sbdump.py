#!/usr/bin/env python3
"""Annotated hex dump of Switchboard frames, as in SPEC.md section 14.

    python3 Protocol/reference/sbdump.py HEX [c2s|s2c]

One line per header field and per body field (nested messages indented); a compressed body is shown inflated.
"""
import json
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from sbwire import (CONTROL, CONTROLS, DEFAULT_LIMITS, ENUM_NAMES, ENUMS, F_COMPRESSED, F_ERROR, KIND_NAMES,  # noqa: E402
                    OPS, PUSH, PUSHES, RESPONSE, STRUCTS, WT_LEN, Reader, op_fields, parse_frame, peek_varint,
                    read_scalar, split_frame, uvarint, zigzag)


def dump(data, direction="any", limits=DEFAULT_LIMITS):
    """Lines 'hex bytes  annotation' for each frame in data."""
    lines, pos = [], 0

    def emit(raw, text, depth=0):
        hexed = " ".join("%02x" % b for b in raw[:12]) + (" .." if len(raw) > 12 else "")
        lines.append("%-42s %s%s" % ("  " * depth + hexed, "  " * depth, text))

    while pos < len(data):
        frame_bytes, size = split_frame(data[pos:], limits)
        frame = parse_frame(frame_bytes, direction, limits, size)
        prefix = size - len(frame_bytes)
        emit(data[pos:pos + prefix], "length = %d" % len(frame_bytes))
        names = [n for bit, n in ((F_COMPRESSED, "COMPRESSED"), (F_ERROR, "ERROR")) if frame.flags & bit]
        emit(frame_bytes[:1], "flags = 0x%02x %s" % (frame.flags, "|".join(names) or "(none)"))
        table = {CONTROL: CONTROLS, PUSH: PUSHES}.get(frame.kind, OPS)
        opname = table[frame.op]["name"] if frame.op in table else "unknown"
        emit(frame_bytes[1:2], "type = 0x%02x: %s, %s %d %s" % (frame_bytes[1], KIND_NAMES[frame.kind],
                                                                "code" if frame.kind == PUSH else "op", frame.op, opname))
        hpos = 2
        if frame.request_id is not None:
            n = len(uvarint(frame.request_id))
            emit(frame_bytes[2:2 + n], "requestId = %d" % frame.request_id)
            hpos += n
        if frame.flags & F_COMPRESSED:
            declared, n = peek_varint(frame_bytes, hpos, 5)
            emit(frame_bytes[hpos:hpos + n], "inflated length = %d" % declared)
            emit(frame_bytes[hpos + n:], "zlib stream, %d bytes (header %s)" % (len(frame_bytes) - hpos - n,
                                                                              frame_bytes[hpos + n:hpos + n + 2].hex(" ")))
            lines.append("%-42s %s" % ("", "inflated body:"))
        if frame.kind == RESPONSE and frame.flags & F_ERROR:
            fields = STRUCTS["ErrorBody"]
        elif frame.kind == CONTROL:
            fields = CONTROLS[frame.op]["fields"] if frame.op in CONTROLS else []
        elif frame.kind == PUSH:
            fields = PUSHES[frame.op]["fields"] if frame.op in PUSHES else []
        else:
            fields = op_fields(OPS[frame.op], KIND_NAMES[frame.kind]) if frame.op in OPS else []
        dump_fields(fields, frame.body, emit, 0)
        pos += size
    return lines


def dump_fields(fields, body, emit, depth):
    by_number, r = {f["n"]: f for f in fields}, Reader(body)
    while r.pos < len(body):
        start = r.pos
        tag = r.varint()
        wt, number = tag & 7, tag >> 3
        f = by_number.get(number)
        if f is None:
            r.skip(wt)
            emit(body[start:r.pos], "field %d, wire type %d: unknown, skipped" % (number, wt), depth)
        elif f["type"] in STRUCTS and wt == WT_LEN:
            inner = r.chunk()
            emit(body[start:r.pos - len(inner)], "field %d %s (%s), %d bytes" % (number, f["name"], f["type"], len(inner)), depth)
            dump_fields(STRUCTS[f["type"]], inner, emit, depth + 1)
        else:
            if wt == WT_LEN and f["type"] in ENUMS:
                packed, items = Reader(r.chunk()), []
                while packed.pos < len(packed.data):
                    items.append(read_scalar(packed, f["type"]))
                value = "packed %s" % items
            else:
                value = read_scalar(r, f["type"])
            if f["type"] in ENUMS and isinstance(value, int):
                value = "%d (%s)" % (value, ENUM_NAMES[f["type"]].get(value, "unknown value"))
            elif f["type"] == "sint":
                value = "%d (zigzag %d)" % (value, zigzag(value))
            elif f["type"] == "string":
                raw = value.encode("utf-8")
                value = "len %d %s" % (len(raw), json.dumps(value if len(value) <= 24 else value[:21] + "...",
                                                              ensure_ascii=False))
            elif f["type"] not in ENUMS:
                value = json.dumps(value)
            emit(body[start:r.pos], "field %d %s = %s" % (number, f["name"], value), depth)


if __name__ == "__main__":
    if len(sys.argv) < 2:
        sys.exit(__doc__)
    print("\n".join(dump(bytes.fromhex(sys.argv[1]), sys.argv[2] if len(sys.argv) > 2 else "any")))
