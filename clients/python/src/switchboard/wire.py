"""Reference codec for the Switchboard wire protocol v1 (Protocol/SPEC.md).

An independent second implementation of the spec, driven by the schema (Protocol/schema.json, of which this package
carries a copy that Tools/codegen/generate.py keeps identical), standard library only. The Python client is built on
it; Protocol/reference/sbwire.py is its command line:

    python3 sbwire.py --selftest            check every vector in Protocol/vectors both ways
    python3 sbwire.py --decode HEX [c2s|s2c] print the canonical JSON rendering of one frame
    python3 sbwire.py --encode JSON          print the frame of a canonical JSON rendering as hex

Library use: encode(message) -> bytes, decode(data, direction, limits) -> message, StreamDecoder for byte
streams, ServerSession for the handshake and request-id rules, mint_token / verify_token for section 5.3.
"""
from __future__ import annotations

import base64
import hashlib
import hmac
import json
import os
import sys
import time
import zlib
from typing import Any, Callable, Dict, List, Optional, Sequence, Tuple, Union

HERE = os.path.dirname(os.path.abspath(__file__))
with open(os.path.join(HERE, "schema.json"), encoding="utf-8") as _schema_file:
    SCHEMA: Dict[str, Any] = json.load(_schema_file)
VECTORS: Optional[str] = None                                 # the directory --selftest reads (set by sbwire.py)

Message = Dict[str, Any]
"""A frame's canonical JSON rendering (SPEC 10): kind, op, requestId, body or error."""
Field = Dict[str, Any]
"""One field of the schema: n, name, type, and optionally repeated, default, req, limit, doc."""

CONTROL, REQUEST, RESPONSE, PUSH = 0, 1, 2, 3                 # type byte bits 7-6 (SPEC 2.3)
KIND_NAMES = ["control", "request", "response", "push"]
F_COMPRESSED, F_ERROR = 0x01, 0x02                            # flags byte (SPEC 2.2)
MAX_U32, MAX_U64 = (1 << 32) - 1, (1 << 64) - 1
MAX_REPEATED = 10000                                          # elements per repeated field per message (SPEC 3.2)
ABSOLUTE_MAX_FRAME = (1 << 28) - 1                            # largest value of a 4-byte length field

ERRORS: Dict[int, Dict[str, Any]] = {e["code"]: e for e in SCHEMA["errors"]}
ENUMS: Dict[str, Dict[str, int]] = {name: e["values"] for name, e in SCHEMA["enums"].items()}
ENUM_NAMES: Dict[str, Dict[int, str]] = {name: {v: k for k, v in vals.items()} for name, vals in ENUMS.items()}
STRUCTS: Dict[str, List[Field]] = {name: s["fields"] for name, s in SCHEMA["structs"].items()}
OPS: Dict[int, Dict[str, Any]] = {o["op"]: o for o in SCHEMA["operations"]}
OPS_BY_NAME: Dict[str, Dict[str, Any]] = {o["name"]: o for o in SCHEMA["operations"]}
CONTROLS: Dict[int, Dict[str, Any]] = {c["op"]: c for c in SCHEMA["controls"]}
CONTROLS_BY_NAME: Dict[str, Dict[str, Any]] = {c["name"]: c for c in SCHEMA["controls"]}
PUSHES: Dict[int, Dict[str, Any]] = {p["code"]: p for p in SCHEMA["pushes"]}
PUSHES_BY_NAME: Dict[str, Dict[str, Any]] = {p["name"]: p for p in SCHEMA["pushes"]}


def op_fields(op: Dict[str, Any], side: str) -> List[Field]:
    """Field list of an op's request or response; a string names another op whose fields are shared."""
    spec: Union[str, List[Field]] = op[side]
    while isinstance(spec, str):
        spec = OPS_BY_NAME[spec][side]
    return spec


class WireError(Exception):
    """A protocol error with its code (SPEC 9). request_id is set when the error is about a well-framed request
    or response, which is then answered (or failed) alone; every other error closes the connection."""

    def __init__(self, code: int, message: str, request_id: Optional[int] = None, op: Optional[int] = None) -> None:
        super().__init__("%s(%d): %s" % (ERRORS[code]["name"] if code in ERRORS else "?", code, message))
        self.code, self.message, self.request_id, self.op = code, message, request_id, op

    @property
    def name(self) -> str:
        return str(ERRORS[self.code]["name"])

    @property
    def fatal(self) -> bool:
        return not (ERRORS[self.code]["open"] and self.request_id is not None)


class JsonError(ValueError):
    """The JSON given to the encoder is not a valid canonical rendering."""


class Limits:
    """What a receiver accepts (SPEC 11). Before the server has sent WELCOME: HANDSHAKE."""

    def __init__(self, maxFrameSize: int = 1 << 20, maxInflatedSize: int = 1 << 20, compression: bool = True) -> None:
        self.max_frame_size = min(maxFrameSize, ABSOLUTE_MAX_FRAME)
        self.max_inflated_size = maxInflatedSize
        self.compression = compression


DEFAULT_LIMITS = Limits()
HANDSHAKE_LIMITS = Limits(16384, 16384, False)

# ---------------------------------------------------------------------------------------------- varints (SPEC 3.1)

NEED, INVALID = "need more bytes", "invalid"
VarintResult = Union[Tuple[int, int], str]
"""(value, size), or NEED or INVALID."""


def uvarint(n: int) -> bytes:
    """Minimal unsigned LEB128: 7 bits per byte, least significant group first, MSB = more bytes follow."""
    out = bytearray()
    while n >= 0x80:
        out.append((n & 0x7F) | 0x80)
        n >>= 7
    out.append(n)
    return bytes(out)


def peek_varint(data: Union[bytes, bytearray], pos: int, max_bytes: int) -> VarintResult:
    """(value, size), NEED when data ends first, or INVALID: longer than max_bytes, overlong, or over 64 bits."""
    value = count = 0
    while True:
        if pos + count >= len(data):
            return INVALID if count >= max_bytes else NEED
        if count >= max_bytes:
            return INVALID
        byte = data[pos + count]
        count += 1
        if count == 10 and byte > 1:
            return INVALID                          # payload bits beyond 2^64
        value |= (byte & 0x7F) << (7 * (count - 1))
        if byte < 0x80:
            if byte == 0 and count > 1:
                return INVALID                      # overlong: a final 0x00 group adds nothing
            return value, count


def zigzag(n: int) -> int:
    return ((n << 1) ^ (n >> 63)) & MAX_U64


def unzigzag(u: int) -> int:
    return (u >> 1) ^ -(u & 1)


# ---------------------------------------------------------------------------------------------- bodies (SPEC 3.2-3.5)

WT_VARINT, WT_I64, WT_LEN, WT_I32 = 0, 1, 2, 5


def default_of(f: Field) -> Any:
    """The value a field has when absent (SPEC 3.5), in the codec's internal form (enums as numbers)."""
    t, d = f["type"], f.get("default")
    if f.get("repeated"):
        return []
    if t in STRUCTS:
        return None
    if t in ENUMS:
        return ENUMS[t][d] if d is not None else 0
    return d if d is not None else {"string": "", "uint": 0, "sint": 0, "bool": False}[t]


class Reader:
    def __init__(self, data: bytes) -> None:
        self.data, self.pos = data, 0

    def varint(self) -> int:
        got = peek_varint(self.data, self.pos, 10)
        if got == NEED:
            raise WireError(1000, "varint runs past the end of the body")
        if got == INVALID:
            raise WireError(1000, "varint is overlong, longer than 10 bytes or over 64 bits")
        assert isinstance(got, tuple)
        self.pos += got[1]
        return got[0]

    def chunk(self) -> bytes:
        n = self.varint()
        if n > len(self.data) - self.pos:
            raise WireError(1000, "length %d runs past the end of the body" % n)
        self.pos += n
        return self.data[self.pos - n:self.pos]

    def skip(self, wt: int) -> None:
        if wt == WT_VARINT:
            self.varint()
        elif wt == WT_LEN:
            self.chunk()
        else:
            width = 8 if wt == WT_I64 else 4
            if len(self.data) - self.pos < width:
                raise WireError(1000, "fixed-width field runs past the end of the body")
            self.pos += width


def read_scalar(reader: Reader, t: str) -> Any:
    if t == "string":
        raw = reader.chunk()
        try:
            return raw.decode("utf-8")
        except UnicodeDecodeError:
            raise WireError(1006, "string is not valid UTF-8") from None
    if t in STRUCTS:
        return decode_fields(STRUCTS[t], reader.chunk())
    v = reader.varint()
    if t == "uint":
        return v
    if t == "sint":
        return unzigzag(v)
    if t == "bool":
        if v > 1:
            raise WireError(1000, "bool holds %d" % v)
        return v == 1
    if v > MAX_U32:                                  # enum
        raise WireError(1000, "enum value %d does not fit in 32 bits" % v)
    return v


def decode_fields(fields: List[Field], data: bytes) -> Dict[str, Any]:
    """Decodes a body into its canonical JSON rendering (a dict; defaults omitted)."""
    by_number = {f["n"]: f for f in fields}
    values: Dict[str, Any] = {f["name"]: default_of(f) for f in fields}
    r = Reader(data)
    while r.pos < len(data):
        tag = r.varint()
        wt, number = tag & 7, tag >> 3
        if wt not in (WT_VARINT, WT_I64, WT_LEN, WT_I32):
            raise WireError(1000, "wire type %d is not allowed" % wt)
        if number == 0 or number > (1 << 29) - 1:
            raise WireError(1000, "field number %d is out of range" % number)
        f = by_number.get(number)
        if f is None:
            r.skip(wt)                               # unknown field: skipped by its wire type (SPEC 3.4)
            continue
        t, name = f["type"], f["name"]
        want = WT_LEN if (t == "string" or t in STRUCTS) else WT_VARINT
        if f.get("repeated") and t in ENUMS and wt == WT_LEN:   # packed repeated enum
            packed = Reader(r.chunk())
            while packed.pos < len(packed.data):
                if len(values[name]) >= MAX_REPEATED:
                    raise WireError(1000, "field %s has more than %d elements" % (name, MAX_REPEATED))
                values[name].append(read_scalar(packed, t))
            continue
        if wt != want:
            raise WireError(1000, "field %d (%s) has wire type %d" % (number, name, wt))
        if f.get("repeated"):
            if len(values[name]) >= MAX_REPEATED:
                raise WireError(1000, "field %s has more than %d elements" % (name, MAX_REPEATED))
            values[name].append(read_scalar(r, t))
        else:
            values[name] = read_scalar(r, t)         # a repeated occurrence of a singular field: the last wins
    return render(fields, values)


def render(fields: List[Field], values: Dict[str, Any]) -> Dict[str, Any]:
    """Canonical JSON rendering: schema order, defaults omitted, enums by name when known."""
    out: Dict[str, Any] = {}
    for f in fields:
        v, t = values[f["name"]], f["type"]
        show: Callable[[Any], Any] = (lambda x: ENUM_NAMES[t].get(x, x)) if t in ENUMS else (lambda x: x)
        if f.get("repeated"):
            if v:
                out[f["name"]] = [show(x) for x in v]
        elif v is not None and (t in STRUCTS or v != default_of(f)):
            out[f["name"]] = show(v)
    return out


def normalize(f: Field, v: Any, where: str) -> Any:
    """A JSON value of field f, checked, in the internal form (enum -> number, message -> encoded bytes)."""
    t = f["type"]
    if t == "string":
        if not isinstance(v, str):
            raise JsonError("%s: expected a string" % where)
        try:
            v.encode("utf-8")
        except UnicodeEncodeError:
            raise JsonError("%s: string is not encodable as UTF-8" % where) from None
        return v
    if t == "bool":
        if not isinstance(v, bool):
            raise JsonError("%s: expected true or false" % where)
        return v
    if t in STRUCTS:
        return encode_fields(STRUCTS[t], v, where)
    if t in ENUMS and isinstance(v, str):
        if v not in ENUMS[t]:
            raise JsonError("%s: %r is not a %s" % (where, v, t))
        return ENUMS[t][v]
    lo, hi = {"uint": (0, MAX_U64), "sint": (-(1 << 63), (1 << 63) - 1)}.get(t, (0, MAX_U32))
    if isinstance(v, bool) or not isinstance(v, int) or not lo <= v <= hi:
        raise JsonError("%s: expected an integer in %d..%d" % (where, lo, hi))
    return v


def encode_field(f: Field, v: Any) -> bytes:
    n, t = f["n"], f["type"]
    if t == "string":
        raw: bytes = v.encode("utf-8")
        return uvarint(n << 3 | WT_LEN) + uvarint(len(raw)) + raw
    if t in STRUCTS:
        encoded: bytes = v
        return uvarint(n << 3 | WT_LEN) + uvarint(len(encoded)) + encoded
    wire = zigzag(v) if t == "sint" else int(v)
    return uvarint(n << 3 | WT_VARINT) + uvarint(wire)


def encode_fields(fields: List[Field], obj: Any, where: str = "body") -> bytes:
    """Canonical encoding of a JSON object: ascending field numbers, defaults omitted, repeated fields unpacked."""
    if not isinstance(obj, dict):
        raise JsonError("%s: expected an object" % where)
    known = {f["name"]: f for f in fields}
    for key in obj:
        if key not in known:
            raise JsonError("%s: no field named %r" % (where, key))
    out = bytearray()
    for f in sorted(fields, key=lambda f: f["n"]):
        if f["name"] not in obj:
            continue
        where_f, v = where + "." + f["name"], obj[f["name"]]
        if f.get("repeated"):
            if not isinstance(v, list):
                raise JsonError("%s: expected an array" % where_f)
            for i, element in enumerate(v):
                out += encode_field(f, normalize(f, element, "%s[%d]" % (where_f, i)))
            continue
        v = normalize(f, v, where_f)
        if f["type"] in STRUCTS or v != default_of(f):
            out += encode_field(f, v)
    return bytes(out)


# ---------------------------------------------------------------------------------------------- frames (SPEC 2, 4)

class Frame:
    def __init__(self, kind: int, op: int, flags: int, request_id: Optional[int], body: bytes, wire_size: int) -> None:
        self.kind, self.op, self.flags, self.request_id = kind, op, flags, request_id
        self.body, self.wire_size = body, wire_size


ALLOWED: Dict[str, Tuple[int, ...]] = {
    "c2s": (CONTROL, REQUEST), "s2c": (CONTROL, RESPONSE, PUSH), "any": (CONTROL, REQUEST, RESPONSE, PUSH)}


def split_frame(buf: Union[bytes, bytearray], limits: Limits = DEFAULT_LIMITS) -> Optional[Tuple[bytes, int]]:
    """The bytes of the first whole frame after its length field and the bytes it took, or None when buf does not
    hold a whole frame yet. The length is checked before any of the body is awaited (SPEC 2.1)."""
    got = peek_varint(buf, 0, 4)
    if got == NEED:
        return None
    if got == INVALID:
        raise WireError(1005, "length field is longer than 4 bytes or not minimal")
    assert isinstance(got, tuple)
    length, size = got
    if length > limits.max_frame_size:
        raise WireError(1001, "frame length %d is over the limit of %d" % (length, limits.max_frame_size))
    if length < 2:
        raise WireError(1004, "frame length %d is shorter than a header" % length)
    if len(buf) < size + length:
        return None
    return bytes(buf[size:size + length]), size + length


def parse_frame(data: bytes, direction: str = "any", limits: Limits = DEFAULT_LIMITS, wire_size: int = 0) -> Frame:
    """Header checks and decompression of one frame (the bytes after its length field)."""
    flags, type_byte = data[0], data[1]
    kind, op = type_byte >> 6, type_byte & 0x3F
    if flags & ~(F_COMPRESSED | F_ERROR):
        raise WireError(1004, "reserved flag bits 0x%02x are set" % flags)
    if kind not in ALLOWED[direction]:
        raise WireError(1004, "a %s frame may not be sent in this direction" % KIND_NAMES[kind])
    if flags & F_ERROR and kind != RESPONSE:
        raise WireError(1004, "ERROR flag on a %s frame" % KIND_NAMES[kind])
    pos, request_id = 2, None
    size: int
    if kind in (REQUEST, RESPONSE):
        got = peek_varint(data, pos, 5)
        if got == NEED:
            raise WireError(1004, "request id runs past the end of the frame")
        if got == INVALID:
            raise WireError(1005, "request id is longer than 5 bytes or not minimal")
        assert isinstance(got, tuple)
        request_id, size = got
        if not 1 <= request_id <= MAX_U32:
            raise WireError(1012, "request id %d is out of range" % request_id)
        pos += size
    body = data[pos:]
    if flags & F_COMPRESSED:
        if not limits.compression:
            raise WireError(1003, "COMPRESSED flag without the zlib feature")
        got = peek_varint(body, 0, 5)
        if got in (NEED, INVALID):
            raise WireError(1002, "inflated-length varint is missing, overlong or longer than 5 bytes")
        assert isinstance(got, tuple)
        declared, size = got
        if declared > limits.max_inflated_size:
            raise WireError(1010, "body declares %d inflated bytes, limit %d" % (declared, limits.max_inflated_size))
        if declared == 0:
            raise WireError(1002, "compressed body declares 0 inflated bytes")
        body = inflate(body[size:], declared)
    return Frame(kind, op, flags, request_id, body, wire_size)


def inflate(stream: bytes, declared: int) -> bytes:
    """One zlib stream (RFC 1950) that must inflate to exactly `declared` bytes; never produces more than
    declared + 1 bytes, whatever the stream says (SPEC 4)."""
    d = zlib.decompressobj()                         # wbits 15: zlib header and Adler-32 required
    try:
        out = d.decompress(stream, declared + 1)
    except zlib.error as e:                          # damaged data, bad header, FDICT, bad Adler-32
        raise WireError(1002, "zlib: %s" % e) from None
    if len(out) > declared:
        raise WireError(1002, "stream inflates past the declared %d bytes" % declared)
    if not d.eof:
        raise WireError(1002, "zlib stream is truncated")
    if d.unused_data:
        raise WireError(1002, "%d bytes after the end of the zlib stream" % len(d.unused_data))
    if len(out) != declared:
        raise WireError(1002, "stream inflates to %d bytes, header declared %d" % (len(out), declared))
    return out


def frame_to_message(frame: Frame) -> Message:
    """The canonical JSON rendering of a parsed frame (SPEC 10)."""
    kind, op, rid = frame.kind, frame.op, frame.request_id
    try:
        if kind == CONTROL:
            if op not in CONTROLS:
                raise WireError(1004, "unknown control op %d" % op)
            return {"kind": "control", "op": CONTROLS[op]["name"], "body": decode_fields(CONTROLS[op]["fields"], frame.body)}
        if kind == PUSH:
            if op not in PUSHES:
                return {"kind": "push", "op": op, "body": {}}          # unknown push: ignored, body not parsed
            return {"kind": "push", "op": PUSHES[op]["name"], "body": decode_fields(PUSHES[op]["fields"], frame.body)}
        if kind == RESPONSE and frame.flags & F_ERROR:
            error = decode_fields(STRUCTS["ErrorBody"], frame.body)
            if error.get("code") in ERRORS:
                error = dict([("code", error["code"]), ("name", ERRORS[error["code"]]["name"])] + list(error.items()))
            return {"kind": "response", "op": OPS[op]["name"] if op in OPS else op, "requestId": rid, "error": error}
        if op not in OPS:
            raise WireError(1013, "unknown op %d" % op)
        side = "request" if kind == REQUEST else "response"
        return {"kind": side, "op": OPS[op]["name"], "requestId": rid, "body": decode_fields(op_fields(OPS[op], side), frame.body)}
    except WireError as e:
        e.request_id, e.op = rid, op                 # None for control and push frames: those errors are fatal
        raise


def decode(data: bytes, direction: str = "any", limits: Limits = DEFAULT_LIMITS) -> Message:
    """Decodes exactly one whole frame."""
    got = split_frame(data, limits)
    if got is None:
        raise WireError(1011, "the input ends inside a frame")
    frame_bytes, size = got
    if size != len(data):
        raise ValueError("%d bytes after the frame" % (len(data) - size))
    return frame_to_message(parse_frame(frame_bytes, direction, limits, size))


class StreamDecoder:
    """Splits a byte stream into messages, whatever the reads look like (SPEC 2, 17)."""

    def __init__(self, direction: str = "any", limits: Limits = DEFAULT_LIMITS) -> None:
        self.direction, self.limits, self.buffer = direction, limits, bytearray()

    def feed(self, data: bytes) -> List[Message]:
        self.buffer += data
        out: List[Message] = []
        while True:
            got = split_frame(self.buffer, self.limits)
            if got is None:
                return out
            frame_bytes, size = got
            del self.buffer[:size]
            out.append(frame_to_message(parse_frame(frame_bytes, self.direction, self.limits, size)))

    def close(self) -> None:
        if self.buffer:
            raise WireError(1011, "stream ended inside a frame (%d bytes)" % len(self.buffer))


def message_parts(msg: Any) -> Tuple[int, int, int, Optional[int], bytes]:
    """(kind, op, flags, request id, body bytes) of a canonical JSON rendering."""
    if not isinstance(msg, dict) or msg.get("kind") not in KIND_NAMES:
        raise JsonError("kind must be control, request, response or push")
    extra = set(msg) - {"kind", "op", "requestId", "body", "error"}
    if extra:
        raise JsonError("unexpected members %s" % sorted(extra))
    kind, op, body = KIND_NAMES.index(msg["kind"]), msg.get("op"), msg.get("body", {})
    rid = None
    if kind in (REQUEST, RESPONSE):
        rid = msg.get("requestId")
        if isinstance(rid, bool) or not isinstance(rid, int) or not 1 <= rid <= MAX_U32:
            raise JsonError("requestId must be an integer in 1..4294967295")
    if kind == CONTROL:
        if op not in CONTROLS_BY_NAME:
            raise JsonError("unknown control op %r" % (op,))
        c = CONTROLS_BY_NAME[op]
        return kind, c["op"], 0, None, encode_fields(c["fields"], body)
    if kind == PUSH:
        if isinstance(op, int) and not isinstance(op, bool) and 0 <= op < 64 and op not in PUSHES:
            return kind, op, 0, None, b""
        if op not in PUSHES_BY_NAME:
            raise JsonError("unknown push %r" % (op,))
        p = PUSHES_BY_NAME[op]
        return kind, p["code"], 0, None, encode_fields(p["fields"], body)
    if kind == RESPONSE and "error" in msg:
        if op in OPS_BY_NAME:
            number = OPS_BY_NAME[op]["op"]
        elif isinstance(op, int) and not isinstance(op, bool) and 0 <= op < 64:
            number = op
        else:
            raise JsonError("op must be an op name or a number below 64")
        error = msg["error"]
        if not isinstance(error, dict):
            raise JsonError("error must be an object")
        error = {k: v for k, v in error.items() if k != "name"}          # the name is derived from the code
        return kind, number, F_ERROR, rid, encode_fields(STRUCTS["ErrorBody"], error, "error")
    if op not in OPS_BY_NAME:
        raise JsonError("unknown op %r" % (op,))
    o = OPS_BY_NAME[op]
    return kind, o["op"], 0, rid, encode_fields(op_fields(o, KIND_NAMES[kind]), body)


def build_frame(flags: int, type_byte: int, request_id: Optional[int], body: bytes) -> bytes:
    """Length || Flags || Type || [RequestId] || Body, with any bytes as body (also used to forge vectors)."""
    header = bytes([flags, type_byte]) + (uvarint(request_id) if request_id is not None else b"")
    length = len(header) + len(body)
    if length > ABSOLUTE_MAX_FRAME:
        raise ValueError("frame of %d bytes does not fit a 4-byte length" % length)
    return uvarint(length) + header + body


def encode(msg: Message, compress: Union[bool, str] = False, threshold: int = 512, level: int = 6) -> bytes:
    """The frame of a canonical JSON rendering. compress: False never; True always; "auto" as a sender does it
    (bodies of at least `threshold` bytes, and only when that makes the body smaller)."""
    kind, op, flags, rid, body = message_parts(msg)
    if compress is True or (compress == "auto" and len(body) >= threshold):
        packed = uvarint(len(body)) + zlib.compress(body, level)
        if len(body) > 0 and (compress is True or len(packed) < len(body)):
            flags, body = flags | F_COMPRESSED, packed
    return build_frame(flags, kind << 6 | op, rid, body)


# ---------------------------------------------------------------------------------------------- session (SPEC 5)

class ServerSession:
    """The server's per-connection checks of SPEC 5.1 and 5.4 on frames from the client, as far as they depend on
    the frames alone: HELLO first and once, version 1, zlib negotiation, pre-handshake limits, request ids.
    Requests count as in flight until respond(request_id) is called."""

    def __init__(self, server_features: Sequence[str] = ("zlib",), max_inflight: int = 128) -> None:
        self.ready, self.features, self.max_inflight = False, set(server_features), max_inflight
        self.in_flight: set[int] = set()
        self.limits, self.buffer = HANDSHAKE_LIMITS, bytearray()

    def feed(self, data: bytes) -> List[Message]:
        """Messages the session accepts; raises WireError for the first one it refuses (fatal or not)."""
        self.buffer += data
        accepted: List[Message] = []
        while True:
            got = split_frame(self.buffer, self.limits)   # one frame at a time: HELLO changes the limits
            if got is None:
                return accepted
            frame_bytes, size = got
            del self.buffer[:size]
            frame = parse_frame(frame_bytes, "c2s", self.limits, size)
            if not self.ready and (frame.kind, frame.op) != (CONTROL, 1):
                raise WireError(1007, "the first frame must be HELLO")
            if frame.kind == REQUEST:                       # SPEC 5.4: these come before the body is decoded
                if frame.request_id in self.in_flight:
                    raise WireError(1014, "request id %d is already in flight" % frame.request_id, frame.request_id)
                if len(self.in_flight) >= self.max_inflight:
                    raise WireError(3001, "more than %d requests in flight" % self.max_inflight, frame.request_id)
            msg = frame_to_message(frame)
            self.check(msg)
            accepted.append(msg)

    def check(self, msg: Message) -> None:
        if not self.ready:
            if msg["body"].get("protocolVersion", 0) != 1:
                raise WireError(1008, "protocol version %r is not 1" % msg["body"].get("protocolVersion", 0))
            agreed = self.features & set(msg["body"].get("features", []))
            self.ready = True
            self.limits = Limits(1 << 20, 1 << 20, "zlib" in agreed)
            return
        if msg["kind"] == "control":
            if msg["op"] == "hello":
                raise WireError(1007, "HELLO twice")
            if msg["op"] == "welcome":
                raise WireError(1004, "a client may not send WELCOME")
            return
        self.in_flight.add(msg["requestId"])

    def respond(self, request_id: int) -> None:
        self.in_flight.discard(request_id)


# ---------------------------------------------------------------------------------------------- tokens (SPEC 5.3)

def b64url(raw: bytes) -> str:
    return base64.urlsafe_b64encode(raw).rstrip(b"=").decode("ascii")


JWT_HEADER = {"alg": "HS256", "typ": "JWT"}
CLOCK_SKEW_SECONDS = 30


def mint_token(secret: bytes, user_id: str, expiry: int, role: str = "user", **claims: Any) -> str:
    """An HS256 JWT (RFC 7519): `sub`, `exp`, `role` when not "user", then any further claims (`iat`, `nbf`, `jti`,
    `grants`)."""
    payload: Dict[str, Any] = {"sub": user_id, "exp": expiry}
    if role != "user":
        payload["role"] = role
    payload.update(claims)
    signing = "%s.%s" % (b64url(json.dumps(JWT_HEADER, separators=(",", ":")).encode("utf-8")),
                         b64url(json.dumps(payload, separators=(",", ":")).encode("utf-8")))
    signature = hmac.new(secret, signing.encode("ascii"), hashlib.sha256).digest()
    return "%s.%s" % (signing, b64url(signature))


def verify_token(secret: bytes, token: str, now: Optional[float] = None) -> Dict[str, Any]:
    """The claims of an HS256 JWT verified with `secret` (the default key: no `kid`), or WireError 2001 (malformed,
    another algorithm or key, bad signature, bad claims, not yet valid) / 2002 (expired beyond the clock skew)."""
    parts = token.split(".")
    if len(parts) != 3:
        raise WireError(2001, "not a JWT")
    try:
        header = json.loads(base64.urlsafe_b64decode(parts[0] + "=" * (-len(parts[0]) % 4)))
        signature = base64.urlsafe_b64decode(parts[2] + "=" * (-len(parts[2]) % 4))
        claims = json.loads(base64.urlsafe_b64decode(parts[1] + "=" * (-len(parts[1]) % 4)))
    except (ValueError, UnicodeDecodeError):
        raise WireError(2001, "token is not base64url JSON") from None
    if not isinstance(header, dict) or header.get("alg") != "HS256" or "kid" in header or "crit" in header:
        raise WireError(2001, "not an HS256 token for the default key")
    expected = hmac.new(secret, ("%s.%s" % (parts[0], parts[1])).encode("ascii"), hashlib.sha256).digest()
    if not hmac.compare_digest(signature, expected):
        raise WireError(2001, "bad signature")
    if not isinstance(claims, dict):
        raise WireError(2001, "token claims are malformed")

    def is_date(name: str) -> bool:
        value = claims.get(name)
        return value is None or (isinstance(value, (int, float)) and not isinstance(value, bool))

    sub = claims.get("sub")
    if not (isinstance(sub, str) and 1 <= len(sub.encode("utf-8")) <= 64 and claims.get("exp") is not None
            and is_date("exp") and is_date("nbf") and is_date("iat")
            and claims.setdefault("role", "user") in ("user", "admin")
            and (claims.get("jti") is None or isinstance(claims["jti"], str))
            and (claims.get("grants") is None or isinstance(claims["grants"], list))):
        raise WireError(2001, "token claims are malformed")
    current = time.time() if now is None else now
    if claims["exp"] <= current - CLOCK_SKEW_SECONDS:
        raise WireError(2002, "token expired")
    if claims.get("nbf") is not None and claims["nbf"] > current + CLOCK_SKEW_SECONDS:
        raise WireError(2001, "token not yet valid")
    return claims


# ---------------------------------------------------------------------------------------------- self-test

def limits_of(vector: Dict[str, Any]) -> Limits:
    spec = vector.get("limits", {})
    return Limits(spec.get("maxFrameSize", 1 << 20), spec.get("maxInflatedSize", 1 << 20), spec.get("compression", True))


def check_vector(v: Dict[str, Any]) -> Optional[str]:
    """None when the vector holds both ways, else what went wrong."""
    data = bytes.fromhex(v["hex"])
    direction = v.get("direction", "any")
    if "expectError" in v:
        want = v["expectError"]
        try:
            if v.get("layer") == "session":
                session = ServerSession()
                session.feed(data)
            else:
                decoder = StreamDecoder(direction, limits_of(v))
                decoder.feed(data)
                decoder.close()
        except WireError as e:
            got = {"code": e.code, "name": e.name, "requestId": e.request_id, "fatal": e.fatal}
            return None if got == want else "expected %s, got %s (%s)" % (want, got, e.message)
        return "expected %s, decoded without error" % (want,)
    try:
        if "messages" in v:
            whole = StreamDecoder(direction).feed(data)
            trickle, dec = [], StreamDecoder(direction)
            for i in range(len(data)):                         # one byte at a time
                trickle += dec.feed(data[i:i + 1])
            dec.close()
            if whole != v["messages"] or trickle != v["messages"]:
                return "stream decodes to %s" % whole
            again = b"".join(encode(m) for m in v["messages"])
            if again == data or v.get("canonical") is False or v.get("compressed"):
                return None
            return "re-encoding differs: %s" % again.hex()[:200]
        got = decode(data, direction, limits_of(v))
        if got != v["message"]:
            return "decodes to %s" % json.dumps(got, ensure_ascii=False)[:300]
        if v.get("compressed"):
            length = peek_varint(data, 0, 4)
            if not isinstance(length, tuple) or not data[length[1]] & F_COMPRESSED:
                return "COMPRESSED flag is not set"
            return None if decode(encode(v["message"], True), direction) == v["message"] else "re-encoding differs"
        canonical = bytes.fromhex(v.get("canonicalHex", v["hex"]))
        again = encode(v["message"])
        return None if again == canonical else "re-encodes to %s" % again.hex()
    except (WireError, JsonError, ValueError) as e:
        return "unexpected error: %s" % e


def vector_files(directory: str) -> List[Tuple[str, List[Dict[str, Any]]]]:
    """(file name, vectors) of every vector file in a directory, by name."""
    out = []
    for name in sorted(os.listdir(directory)):
        if name.endswith(".json"):
            with open(os.path.join(directory, name), encoding="utf-8") as f:
                out.append((name, list(json.load(f)["vectors"])))
    return out


def selftest(directory: Optional[str] = None) -> int:
    directory = directory or VECTORS
    if directory is None:
        print("no vectors directory: run Protocol/reference/sbwire.py --selftest")
        return 2
    passed = failed = 0
    for name, vectors in vector_files(directory):
        for v in vectors:
            problem = check_vector(v)
            if problem:
                failed += 1
                print("FAIL %s %s: %s" % (name, v["name"], problem))
            else:
                passed += 1
    print("%d passed, %d failed" % (passed, failed))
    return 1 if failed or not passed else 0


def main(argv: List[str]) -> int:
    if len(argv) >= 2 and argv[1] == "--selftest":
        return selftest()
    if len(argv) >= 3 and argv[1] == "--decode":
        print(json.dumps(decode(bytes.fromhex(argv[2]), argv[3] if len(argv) > 3 else "any"), ensure_ascii=False))
        return 0
    if len(argv) >= 3 and argv[1] == "--encode":
        print(encode(json.loads(argv[2])).hex())
        return 0
    print(__doc__)
    return 2


if __name__ == "__main__":
    sys.exit(main(sys.argv))
