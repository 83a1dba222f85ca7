#!/usr/bin/env python3
"""(Re)writes Protocol/vectors/*.json with the reference codec sbwire.py.

    python3 Protocol/reference/make_vectors.py

Every vector is checked while it is made: a valid message must encode canonically and decode back to itself, and
every malformed input must fail with exactly the error code, request id and connection fate written here (the
intent of SPEC.md section 12). A disagreement stops the script, so the files never hold an unchecked vector.
Vector format: Protocol/vectors/README.md.
"""
import json
import os
import sys
import zlib

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import sbwire as w  # noqa: E402

OUT = w.VECTORS
ERR = w.ERRORS

# ---------------------------------------------------------------------------------------------- raw field helpers


def tag(n, wt):
    return w.uvarint(n << 3 | wt)


def fv(n, value):                       # varint field
    return tag(n, 0) + w.uvarint(value)


def fb(n, raw):                         # length-delimited field
    return tag(n, 2) + w.uvarint(len(raw)) + raw


def fs(n, text):
    return fb(n, text.encode("utf-8"))


def req(op, rid, body, flags=0):
    return w.build_frame(flags, 0x40 | op, rid, body)


def resp(op, rid, body, flags=0):
    return w.build_frame(flags, 0x80 | op, rid, body)


def push(code, body, flags=0):
    return w.build_frame(flags, 0xC0 | code, None, body)


def ctl(op, body, flags=0):
    return w.build_frame(flags, op, None, body)


def zbody(body, declared=None, level=6, wbits=15, stream=None):
    """A compressed body: uvarint(inflated length) || zlib stream."""
    if stream is None:
        c = zlib.compressobj(level, zlib.DEFLATED, wbits)
        stream = c.compress(body) + c.flush()
    return w.uvarint(len(body) if declared is None else declared) + stream


OPS = {o["name"]: o["op"] for o in w.SCHEMA["operations"]}


def direction_of(msg):
    if msg["kind"] == "request" or (msg["kind"] == "control" and msg["op"] == "hello"):
        return "c2s"
    return "s2c"


# ---------------------------------------------------------------------------------------------- vector makers

def valid(name, description, msg, direction=None, raw=None, compress=False, limits=None):
    """A valid frame. raw: non-canonical bytes whose decoding is msg (then canonicalHex is added)."""
    direction = direction or direction_of(msg)
    lim = w.Limits(**limits) if limits else w.DEFAULT_LIMITS
    canonical = w.encode(msg)
    if raw is None:
        raw = w.encode(msg, compress) if compress else canonical
    got = w.decode(raw, direction, lim)
    if got != msg:
        sys.exit("vector %s: %s decodes to\n%s\nnot\n%s" % (name, raw.hex()[:200], json.dumps(got)[:600], json.dumps(msg)[:600]))
    if w.decode(canonical, direction) != msg:
        sys.exit("vector %s: the message is not in canonical form" % name)
    v = {"name": name, "description": description, "direction": direction, "hex": raw.hex(),
         "compressed": bool(compress)}
    if limits:
        v["limits"] = limits
    if not compress and raw != canonical:
        v["canonical"] = False
        v["canonicalHex"] = canonical.hex()
    v["message"] = msg
    return v


def invalid(name, description, raw, code, request_id=None, direction="c2s", limits=None, layer="frame",
            replayable=True):
    fatal = not (ERR[code]["open"] and request_id is not None)
    v = {"name": name, "description": description, "direction": direction, "hex": raw.hex()}
    if layer != "frame":
        v["layer"] = layer
    if not replayable:
        v["replayable"] = False
    if limits:
        v["limits"] = limits
    v["expectError"] = {"code": code, "name": ERR[code]["name"], "requestId": request_id, "fatal": fatal}
    problem = w.check_vector(v)
    if problem:
        sys.exit("vector %s: %s" % (name, problem))
    return v


def stream(name, description, messages, direction, raw=None, compressed=False):
    data = raw if raw is not None else b"".join(w.encode(m) for m in messages)
    v = {"name": name, "description": description, "direction": direction, "hex": data.hex(), "messages": messages}
    if compressed:
        v["compressed"] = True
    problem = w.check_vector(v)
    if problem:
        sys.exit("vector %s: %s" % (name, problem))
    return v


def R(op, rid, body=None):
    return {"kind": "request", "op": op, "requestId": rid, "body": body or {}}


def S(op, rid, body=None):
    return {"kind": "response", "op": op, "requestId": rid, "body": body or {}}


def E(op, rid, code, **fields):
    error = {"code": code}
    if code in ERR:
        error["name"] = ERR[code]["name"]
    error.update(fields)
    return {"kind": "response", "op": op, "requestId": rid, "error": error}


def P(code, body=None):
    return {"kind": "push", "op": code, "body": body or {}}


def C(op, body=None):
    return {"kind": "control", "op": op, "body": body or {}}


# ---------------------------------------------------------------------------------------------- sample bodies

T0 = 1767225600000          # 2026-01-01T00:00:00Z in ms
ITEM_NAME = {"key": "Name", "value": "Tony"}
VECTOR_USER = "vector"     # the user of the session vectors' HELLOs (open development mode, SPEC 5.3-2)

REQUESTS = {
    "logout": {},
    "renewToken": {"token": "eyJhbGciOiJIUzI1NiIsInR5cCI6IkpXVCJ9.eyJzdWIiOiJUb255IiwiZXhwIjoxNzY3MjI1NjAwfQ.c2lnbmF0dXJl"},
    "setChannelMetadata": {"channel": "lobby", "items": [{"key": "Apple", "value": "100", "revision": 3},
                                                         {"key": "Banana", "value": "200"}],
                           "majorRevision": 3, "recordTs": True, "recordUserId": True, "lock": "editor"},
    "getChannelMetadata": {"channel": "stage-1", "channelType": "stream"},
    "updateChannelMetadata": {"channel": "lobby", "items": [{"key": "Apple", "value": "120", "revision": 4}]},
    "removeChannelMetadata": {"channel": "lobby", "items": [{"key": "Banana"}], "majorRevision": 4},
    "setUserMetadata": {"items": [{"key": "Name", "value": "Tony"}, {"key": "Age", "value": "40"}],
                        "recordTs": True, "recordUserId": True},
    "getUserMetadata": {"userId": "Tony"},
    "updateUserMetadata": {"userId": "Tony", "items": [{"key": "Age", "value": "45", "revision": 7}],
                           "majorRevision": 7},
    "removeUserMetadata": {"userId": "Tony"},
    "subscribeUserMetadata": {"userId": "Tony"},
    "unsubscribeUserMetadata": {"userId": "Tony"},
    "setLock": {"channel": "lobby", "lockName": "editor", "ttlSeconds": 60},
    "acquireLock": {"channel": "lobby", "lockName": "editor", "retry": True},
    "releaseLock": {"channel": "lobby", "lockName": "editor"},
    "removeLock": {"channel": "lobby", "channelType": "stream", "lockName": "editor"},
    "revokeLock": {"channel": "lobby", "lockName": "editor", "owner": "Tony"},
    "getLocks": {"channel": "lobby"},
    "subscribeChannel": {"channel": "lobby", "withMetadata": True, "withLock": True},
    "unsubscribeChannel": {"channel": "stage-1", "channelType": "stream"},
    "whoNow": {"channel": "lobby", "includeState": True, "page": "b1.AAAAZA"},
    "whereNow": {"userId": "Ann"},
    "setState": {"channel": "lobby", "items": [{"key": "mood", "value": "happy"}, {"key": "mic", "value": "on"}]},
    "getState": {"channel": "lobby", "userId": "Ann"},
    "removeState": {"channel": "lobby", "keys": ["mic"]},
    "subscribeEvent": {"expirySeconds": 86400, "syncEnabled": True, "publishers": ["Ann", "Bob"]},
    "unsubscribeEvent": {"publishers": ["Bob"]},
    "publishEvent": {"value": 10001, "expirySeconds": 3600, "onlineOnly": False, "ext": "{\"status\":\"busy\"}"},
    "queryEventSubscriptions": {"publishers": ["Ann", "Bob"]},
    "resumeEvents": {"epoch": T0 * 1000 + 3, "after": 41},
    "setUserInfo": {"info": {"userId": "Tony", "name": "Tony Stark", "portraitUri": "https://example.com/t.png"}},
    "getUserInfo": {"userIds": ["Tony", "Ann", "ghost"]},
    "setGroupInfo": {"info": {"groupId": "g1", "name": "Avengers", "extra": "{\"max\":6}"}},
    "getGroupInfo": {"groupIds": ["g1"]},
    "setGroupMemberInfo": {"info": {"groupId": "g1", "userId": "Tony", "nickname": "Iron Man"}},
    "getGroupMemberInfo": {"groupId": "g1", "userIds": ["Tony", "Ann"]},
    "updateGroupMembers": {"groupId": "g1", "add": ["Ann", "Bob"], "remove": ["Eve"]},
    "getGroupMembers": {"groupId": "g1", "limit": 2},
    "clearProfile": {"kind": "groupMember", "id": "g1", "memberUserId": "Tony"},
    "subscribeProfiles": {"userIds": ["Tony"], "groupIds": ["g1"]},
    "unsubscribeProfiles": {"groupIds": ["g1"]},
    "registerProvider": {"kinds": ["user", "group"]},
    "answerProvider": {"providerRequestId": 42, "found": True,
                       "user": {"userId": "ghost", "name": "Ghost", "updatedAtMs": T0}},
    "kickUser": {"userId": "Eve", "reason": "spam", "banSeconds": 3600},
    "forceUnsubscribe": {"userId": "Eve", "channel": "stage-1", "channelType": "stream", "reason": "off topic"},
    "revokeTokens": {"userId": "Eve", "issuedBeforeMs": T0},
    "listChannels": {"channelType": "message", "prefix": "room:", "cursor": "1:room:b", "limit": 2},
    "getLastSeen": {"userIds": ["Ann", "Eve"]},
    "setWill": {"actions": [
        {"operation": 12, "items": [{"key": "status", "value": "away"}], "recordTs": True},
        {"operation": 11, "channel": "room.7", "items": [{"key": "seat-3"}], "majorRevision": 4},
        {"operation": 20, "channel": "room.7", "lock": "mic"},
        {"operation": 34, "value": 10001, "expirySeconds": 3600, "onlineOnly": False, "ext": "gone"}],
        "delaySeconds": 30},
    "subscribeChanges": {"kinds": ["presenceJoin", "presenceLeave", "online"], "channelPattern": "room.*",
                         "userPattern": "player-*", "resumeEpoch": T0 * 1000 + 7, "resumeFrom": 4096},
    "broadcast": {"channel": "doc-7", "data": '{"cursor":[120,48]}', "echo": True},
    "rewindBroadcasts": {"channel": "doc-7", "channelType": "stream", "limit": 20, "maxAgeSeconds": 60,
                         "afterSequence": T0 * 1000 + 3},
}

RESPONSES = {
    "renewToken": {"expiresAtMs": T0 + 86400000},
    "setChannelMetadata": {"majorRevision": 4},
    "getChannelMetadata": {"majorRevision": 2, "items": [
        {"key": "topic", "value": "launch", "revision": 2, "updateTs": T0, "authorUserId": "Tony"},
        {"key": "slides", "value": "12", "revision": 1}]},
    "updateChannelMetadata": {"majorRevision": 5},
    "removeChannelMetadata": {"majorRevision": 6},
    "setUserMetadata": {"majorRevision": 1},
    "getUserMetadata": {"majorRevision": 8, "items": [
        {"key": "Name", "value": "Tony", "revision": 1, "updateTs": T0, "authorUserId": "Tony"},
        {"key": "Age", "value": "45", "revision": 8, "updateTs": T0 + 5000, "authorUserId": "Tony"}],
        "userId": "Tony"},
    "updateUserMetadata": {"majorRevision": 8},
    "removeUserMetadata": {},
    "getLocks": {"locks": [{"lockName": "editor", "owner": "Tony", "ttlSeconds": 60},
                           {"lockName": "podium", "ttlSeconds": 10}]},
    "whoNow": {"totalOccupancy": 102, "users": [
        {"userId": "Ann", "states": [{"key": "mood", "value": "happy"}]}, {"userId": "Bob"}], "nextPage": "b1.AAAAZg"},
    "whereNow": {"channels": [{"channel": "lobby"}, {"channel": "stage-1", "channelType": "stream"}],
                 "totalChannel": 2},
    "getState": {"userId": "Ann", "items": [{"key": "mood", "value": "happy"}]},
    "subscribeEvent": {"failedPublishers": ["no such user"]},
    "publishEvent": {"eventId": "e-000042", "timestampMs": T0},
    "resumeEvents": {"epoch": T0 * 1000 + 3, "position": 57, "replayed": 2},
    "queryEventSubscriptions": {"subscriptions": [
        {"publisher": "Ann", "subscribedAtMs": T0, "expiresAtMs": T0 + 86400000, "remainingSeconds": 86399}]},
    "getUserInfo": {"users": [{"userId": "Tony", "name": "Tony Stark", "updatedAtMs": T0},
                              {"userId": "Ann", "name": "安娜", "portraitUri": "https://example.com/a.png"}],
                    "missing": ["ghost"]},
    "getGroupInfo": {"groups": [{"groupId": "g1", "name": "Avengers", "updatedAtMs": T0}]},
    "getGroupMemberInfo": {"members": [{"groupId": "g1", "userId": "Tony", "nickname": "Iron Man"}],
                           "missing": ["Ann"]},
    "updateGroupMembers": {"memberCount": 3},
    "getGroupMembers": {"userIds": ["Ann", "Bob"], "nextPage": "m1.Qm9i", "totalMembers": 3},
    "clearProfile": {"removed": 1},
    "kickUser": {"sessionsEnded": 2, "bannedUntilMs": T0 + 3600000},
    "forceUnsubscribe": {"sessionsUnsubscribed": 1},
    "revokeTokens": {"sessionsEnded": 1, "keptUntilMs": T0 + 2592030000},
    "listChannels": {"channels": [{"channel": "room:c", "users": 2, "sessions": 3},
                                  {"channel": "room:d", "users": 1, "sessions": 1}], "nextCursor": "1:room:d"},
    "getLastSeen": {"users": [{"userId": "Ann", "online": True}, {"userId": "Eve", "lastSeenMs": T0}]},
    "setWill": {"actions": 4},
    "getWill": {"actions": [{"operation": 12, "items": [{"key": "status", "value": "away"}]}], "delaySeconds": 30},
    "info": {"nodeId": "9f2c41aa", "version": "0.9.0", "uptimeMs": 3723000, "serverTimeMs": T0, "connections": 4,
             "sessions": 3, "usersOnline": 2, "channels": 2, "memberships": 3, "userSubscriptions": 1,
             "metadataSets": 5, "metadataItems": 12, "writesTotal": 840, "writesPerSecond": 14,
             "feedPosition": 1207, "nodes": [
                 {"nodeId": "9f2c41aa", "address": "10.0.0.5:7400", "startedAtMs": T0 - 3723000,
                  "heartbeatAtMs": T0 - 400, "alive": True, "appliedPosition": 1207, "local": True},
                 {"nodeId": "c03e7b19", "address": "10.0.0.6:7400", "startedAtMs": T0 - 90000,
                  "heartbeatAtMs": T0 - 6100, "appliedPosition": 1180, "lagPositions": 27, "lagMs": 5200}]},
    "subscribeChanges": {"epoch": T0 * 1000 + 7, "position": 4100, "replayed": 2},
    "broadcast": {"sequence": T0 * 1000 + 5, "timestampMs": T0, "delivered": 3},
    "rewindBroadcasts": {"broadcasts": [{"sequence": T0 * 1000 + 4, "sender": "Ann", "data": "wave", "timestampMs": T0},
                                        {"sequence": T0 * 1000 + 5, "sender": "Eve", "data": '{"cursor":[1,2]}',
                                         "timestampMs": T0 + 40}], "latestSequence": T0 * 1000 + 6},
}


def frames_file():
    vs = []
    for rid, o in enumerate(w.SCHEMA["operations"], start=1):
        name = o["name"]
        vs.append(valid("request.%s" % name, "A typical %s request (op %d, type byte 0x%02X)." % (name, o["op"], 0x40 | o["op"]),
                        R(name, rid, REQUESTS.get(name, {}))))
        vs.append(valid("response.%s" % name, "A successful %s response (type byte 0x%02X)." % (name, 0x80 | o["op"]),
                        S(name, rid, RESPONSES.get(name, {}))))
    # controls
    hello = {"protocolVersion": 1, "features": ["zlib", "grease.7f3a"], "token": REQUESTS["renewToken"]["token"],
             "userId": "Tony", "clientType": "ios", "deviceId": "A1B2-C3D4", "heartbeatMs": 15000,
             "clientName": "sbdemo/1.0"}
    welcome = {"protocolVersion": 1, "features": ["zlib"], "sessionId": "s-7f3a91", "userId": "Tony",
               "maxFrameSize": 1048576, "maxInflatedSize": 1048576, "maxInflight": 128, "heartbeatMs": 15000,
               "heartbeatMisses": 3, "serverTimeMs": T0, "compressThreshold": 512, "serverName": "switchboard/1.0",
               "requestsPerSecond": 200}
    vs += [
        valid("control.hello", "HELLO with a token and the zlib feature (plus a grease feature the server ignores).",
              C("hello", hello)),
        valid("control.hello.minimal", "The smallest useful HELLO: protocol version 1 only (open development mode).",
              C("hello", {"protocolVersion": 1})),
        valid("control.hello.dev", "HELLO in open development mode: empty token, the user id names the user.",
              C("hello", {"protocolVersion": 1, "userId": "dev-user", "clientType": "desktop"})),
        valid("control.welcome", "WELCOME with every field set.", C("welcome", welcome)),
        valid("control.welcome.admin", "WELCOME of an admin session without compression.",
              C("welcome", {"protocolVersion": 1, "sessionId": "s-1", "userId": "ops", "isAdmin": True})),
        valid("control.ping.c2s", "Client PING with a nonce.", C("ping", {"nonce": 1}), "c2s"),
        valid("control.ping.s2c", "Server PING with a large nonce.", C("ping", {"nonce": 1 << 40}), "s2c"),
        valid("control.ping.empty", "PING with nonce 0 (omitted): the smallest frame, length 2.", C("ping"), "c2s"),
        valid("control.pong.s2c", "PONG answering nonce 1.", C("pong", {"nonce": 1}), "s2c"),
        valid("control.pong.c2s", "Client PONG answering a server PING.", C("pong", {"nonce": 1 << 40}), "c2s"),
        valid("control.goAway.shutdown", "Server shutdown: GOAWAY 8002, lastRequestId 7.",
              C("goAway", {"code": 8002, "message": "server shutting down", "lastRequestId": 7, "reason": "serverShutdown"})),
        valid("control.goAway.logout", "Normal close after logout: code 0 (omitted), reason logout.",
              C("goAway", {"lastRequestId": 9, "reason": "logout"})),
        valid("control.goAway.protocolError", "Protocol error: code 1005, reason protocolError (the default, omitted).",
              C("goAway", {"code": 1005, "message": "length field is not minimal"})),
        valid("control.goAway.slowConsumer", "Slow consumer cut off.",
              C("goAway", {"code": 3004, "reason": "slowConsumer"})),
        valid("control.goAway.heartbeat", "Heartbeat timeout.", C("goAway", {"code": 1009, "reason": "abnormal"})),
        valid("control.goAway.c2s", "A client may send GOAWAY too before closing.",
              C("goAway", {"code": 1002, "message": "bad zlib stream"}), "c2s"),
        valid("control.goAway.unknownReason", "Unknown SessionEndReason 42 is kept as a number.",
              C("goAway", {"code": 8002, "reason": 42})),
    ]
    # pushes
    vs += [
        valid("push.storageEvent.channel", "Channel metadata set: the written items with their new revisions.",
              P("storageEvent", {"storageType": "channel", "eventType": "set", "target": "lobby", "majorRevision": 4,
                                 "items": [{"key": "Apple", "value": "100", "revision": 4, "updateTs": T0,
                                            "authorUserId": "Tony"}], "publisher": "Tony", "timestampMs": T0})),
        valid("push.storageEvent.userSnapshot", "Snapshot after subscribeUserMetadata (storageType user and eventType "
              "snapshot are the defaults and are omitted).",
              P("storageEvent", {"target": "Tony", "majorRevision": 8, "items": [
                  {"key": "Name", "value": "Tony", "revision": 1}, {"key": "Age", "value": "45", "revision": 8}],
                  "timestampMs": T0})),
        valid("push.storageEvent.removeAll", "The whole user set was removed: no items, majorRevision 0.",
              P("storageEvent", {"eventType": "remove", "target": "Tony", "publisher": "admin", "timestampMs": T0})),
        valid("push.storageEvent.resumed", "A resumed snapshot (SB-13.1-8): the items written after majorRevision 5 "
              "and the keys removed since; the set is at 8.",
              P("storageEvent", {"target": "Tony", "majorRevision": 8, "items": [
                  {"key": "Age", "value": "46", "revision": 8}], "resumedFrom": 5, "removedKeys": ["Nick", "City"],
                  "timestampMs": T0})),
        valid("push.storageEvent.resumeFailed", "A resume that could not be given as changes: the whole set, "
              "resumeFailed true.",
              P("storageEvent", {"storageType": "channel", "target": "lobby", "majorRevision": 3, "items": [
                  {"key": "topic", "value": "news", "revision": 3}], "resumeFailed": True, "timestampMs": T0})),
        valid("request.subscribeUserMetadata.resume", "Subscribe to Tony's metadata resuming from majorRevision 5.",
              R("subscribeUserMetadata", 40, {"userId": "Tony", "sinceRevision": 5})),
        valid("request.subscribeChannel.resume", "Join lobby with metadata, resuming from majorRevision 3.",
              R("subscribeChannel", 41, {"channel": "lobby", "withMetadata": True, "sinceRevision": 3})),
        valid("push.storageEvent.expired", "Items of a user set reached their TTL: the expired keys (values empty, "
              "revision -1, on the wire as the sint -1), the new majorRevision, no publisher (the server).",
              P("storageEvent", {"eventType": "expired", "target": "Tony", "majorRevision": 9,
                                 "items": [{"key": "typing"}, {"key": "cursor"}], "timestampMs": T0})),
        valid("push.storageEvent.setWithTtl", "A channel item written with a TTL: the event carries its expiresAtMs "
              "(ttlMs is not echoed).",
              P("storageEvent", {"storageType": "channel", "eventType": "set", "target": "lobby", "majorRevision": 5,
                                 "items": [{"key": "cursor", "value": "3,4", "revision": 5, "expiresAtMs": T0 + 5000}],
                                 "publisher": "Tony", "timestampMs": T0})),
        valid("push.storageEvent.expiredSet", "A whole set reached its own TTL (setTtlMs, SB-13.1-10): no items, "
              "majorRevision 0, no publisher, no expiresAtMs.",
              P("storageEvent", {"storageType": "channel", "eventType": "expired", "target": "lobby",
                                 "timestampMs": T0})),
        valid("push.storageEvent.setWithSetTtl", "A write to a set that has a TTL of its own: the event carries the "
              "set's expiresAtMs (field 12).",
              P("storageEvent", {"eventType": "update", "target": "Tony", "majorRevision": 4,
                                 "items": [{"key": "status", "value": "away", "revision": 4}],
                                 "publisher": "Tony", "timestampMs": T0, "expiresAtMs": T0 + 60000})),
        valid("push.lockEvent", "Lock acquired.", P("lockEvent", {"channel": "lobby", "eventType": "acquired",
              "locks": [{"lockName": "editor", "owner": "Tony", "ttlSeconds": 60}], "timestampMs": T0})),
        valid("push.lockEvent.snapshot", "Lock snapshot after subscribing withLock.",
              P("lockEvent", {"channel": "lobby", "locks": [{"lockName": "editor", "ttlSeconds": 60},
                                                           {"lockName": "podium", "owner": "Ann", "ttlSeconds": 10}]})),
        valid("push.presenceEvent.snapshot", "Presence snapshot: nested UserState and StateItem messages.",
              P("presenceEvent", {"channel": "lobby", "snapshot": [
                  {"userId": "Ann", "states": [{"key": "mood", "value": "happy"}, {"key": "mic", "value": "on"}]},
                  {"userId": "Bob"}], "totalOccupancy": 2, "timestampMs": T0})),
        valid("push.presenceEvent.snapshotPart", "A snapshot split over several pushes: a part that is not the last "
              "carries more = true (SPEC 13.3-12); the last part, like an unsplit snapshot, has no 'more'.",
              P("presenceEvent", {"channel": "hall", "snapshot": [{"userId": "u001"}, {"userId": "u002"}],
                                  "totalOccupancy": 3, "timestampMs": T0, "more": True})),
        valid("push.presenceEvent.snapshotLastPart", "The last part of that split snapshot: no 'more'.",
              P("presenceEvent", {"channel": "hall", "snapshot": [{"userId": "u003"}], "totalOccupancy": 3,
                                  "timestampMs": T0})),
        valid("push.presenceEvent.remoteJoin", "A user joined a stream channel with state.",
              P("presenceEvent", {"channel": "stage-1", "channelType": "stream", "eventType": "remoteJoin",
                                  "publisher": "Cat", "states": [{"key": "role", "value": "host"}],
                                  "totalOccupancy": 3, "timestampMs": T0})),
        valid("push.presenceEvent.interval", "Interval mode: one event lists every change since the previous one.",
              P("presenceEvent", {"channel": "arena", "eventType": "interval", "joined": ["u1", "u2"], "left": ["u3"],
                                  "timedOut": ["u4"], "stateChanged": [{"userId": "u5", "states": [
                                      {"key": "hp", "value": "90"}]}], "totalOccupancy": 77, "timestampMs": T0})),
        valid("push.subscribedEvents.online", "Online state (server-published): Ann logged in, online on iOS and web.",
              P("subscribedEvents", {"events": [{"eventId": "e-1", "value": 1, "publisher": "Ann", "timestampMs": T0,
                                                 "onlineClientTypes": ["ios", "web"]}]})),
        valid("push.subscribedEvents.batch", "A batch of two events, one with an unknown client type 200.",
              P("subscribedEvents", {"events": [
                  {"eventId": "e-2", "value": 3, "publisher": "Bob", "timestampMs": T0, "onlineClientTypes": [200]},
                  {"eventId": "e-3", "value": 10001, "publisher": "Ann", "timestampMs": T0 + 1,
                   "expiresAtMs": T0 + 3600001, "ext": "{\"status\":\"busy\"}"}]})),
        valid("push.subscribedEvents.numbered", "An online-only event with the delivering node's epoch and position "
              "(SB-13.4-9), as live and as replayed after resumeEvents.",
              P("subscribedEvents", {"events": [
                  {"eventId": "e-4", "value": 10002, "publisher": "Ann", "timestampMs": T0 + 2,
                   "expiresAtMs": T0 + 604800002, "epoch": T0 * 1000 + 3, "position": 42}]})),
        valid("response.subscribeEvent.position", "subscribeEvent answered with where the node's numbering of "
              "online-only events stands.",
              S("subscribeEvent", 23, {"epoch": T0 * 1000 + 3, "position": 41})),
        valid("response.resumeEvents.gap", "A resume from another epoch: gap, nothing replayed.",
              S("resumeEvents", 24, {"epoch": T0 * 1000 + 9, "position": 5, "gap": True})),
        valid("push.profileChanged.user", "A subscribed user's record changed.",
              P("profileChanged", {"user": {"userId": "Tony", "name": "Tony S.", "updatedAtMs": T0}, "id": "Tony"})),
        valid("push.profileChanged.memberList", "A group's member list changed.",
              P("profileChanged", {"kind": "memberList", "id": "g1", "memberCount": 3})),
        valid("push.profileChanged.removed", "A group member record was cleared.",
              P("profileChanged", {"kind": "groupMember", "member": {"groupId": "g1", "userId": "Tony"},
                                   "removed": True, "id": "g1"})),
        valid("push.providerRequest", "The server asks the provider for a user record.",
              P("providerRequest", {"providerRequestId": 42, "id": "ghost"})),
        valid("push.providerRequest.member", "The server asks the provider for a group member record.",
              P("providerRequest", {"providerRequestId": 43, "kind": "groupMember", "id": "g1", "memberUserId": "Ann"})),
        valid("push.serverNotice", "Token expires soon.",
              P("serverNotice", {"code": 2002, "message": "token expires in 60 s", "atMs": T0 + 60000})),
        valid("push.change.presenceJoin", "Admin change stream: a member joined a channel with state.",
              P("change", {"position": 4097, "channel": "room.7", "userId": "player-9",
                           "states": [{"key": "seat", "value": "3"}], "totalOccupancy": 12, "timestampMs": T0})),
        valid("push.change.online", "Admin change stream: a user dropped (abnormal end), still online on the web.",
              P("change", {"position": 4098, "kind": "online", "userId": "player-9", "onlineValue": 3,
                           "onlineClientTypes": ["web"], "timestampMs": T0})),
        valid("push.change.channelMetadata", "Admin change stream: a channel's metadata was updated.",
              P("change", {"position": 4099, "kind": "channelMetadata", "channel": "room.7", "channelType": "stream",
                           "storageEventType": "update", "majorRevision": 5,
                           "items": [{"key": "topic", "value": "finals", "revision": 9}], "author": "Ann",
                           "timestampMs": T0})),
        valid("push.change.userMetadataSetTtl", "Admin change stream: a write to a user set with a TTL of its own "
              "(expiresAtMs, field 17).",
              P("change", {"position": 4101, "kind": "userMetadata", "userId": "player-9", "storageEventType": "update",
                           "majorRevision": 2, "items": [{"key": "status", "value": "away", "revision": 2}],
                           "author": "player-9", "timestampMs": T0, "expiresAtMs": T0 + 60000})),
        valid("push.change.lock", "Admin change stream: a lock was acquired.",
              P("change", {"position": 4100, "kind": "lock", "channel": "room.7", "lockEventType": "acquired",
                           "locks": [{"lockName": "mic", "owner": "Ann", "ttlSeconds": 30}], "timestampMs": T0})),
        valid("push.channelBroadcast", "An ephemeral broadcast to a channel the session is in (SPEC 13.11).",
              P("channelBroadcast", {"channel": "doc-7", "sequence": T0 * 1000 + 5, "sender": "Eve",
                                     "data": '{"cursor":[1,2]}', "timestampMs": T0 + 40})),
        valid("push.unsubscribed", "A moderator took the session out of a stream channel.",
              P("unsubscribed", {"channel": "stage-1", "channelType": "stream", "reason": "off topic"})),
    ]
    # error responses
    vs += [
        valid("error.revisionConflict", "CAS failure on the whole set: stored majorRevision is 7.",
              E("setUserMetadata", 2, 5000, message="majorRevision is 7, not 5", currentRevision=7)),
        valid("error.itemRevisionConflict.absent", "CAS failure on an item that does not exist: currentRevision 0, "
              "which is not the default (-1) and so is on the wire.",
              E("updateChannelMetadata", 3, 5001, message="item Apple does not exist", currentRevision=0, key="Apple")),
        valid("request.setChannelMetadata.ttl", "A channel item that expires 5 s after the write (ttlMs, field 6 of "
              "MetadataItem), created only if absent (revision 0).",
              R("setChannelMetadata", 8, {"channel": "lobby", "items": [
                  {"key": "cursor", "value": "3,4", "revision": 0, "ttlMs": 5000}]})),
        valid("response.getUserMetadata.ttl", "A get answer with an item that has a TTL: its expiresAtMs (field 7).",
              S("getUserMetadata", 9, {"majorRevision": 3, "userId": "Tony", "items": [
                  {"key": "typing", "value": "yes", "revision": 3, "expiresAtMs": T0 + 300}]})),
        valid("error.invalidTtl", "An item's ttlMs outside 100 ms..365 days.",
              E("setUserMetadata", 10, 7017, message="ttlMs must be 0 or 100-31536000000", key="typing")),
        valid("request.setUserMetadata.setTtl", "A write that gives the whole set a TTL of 60 s (setTtlMs, field 6, "
              "a sint: 60000 zigzags to 120000).",
              R("setUserMetadata", 11, {"items": [{"key": "status", "value": "away"}], "setTtlMs": 60000})),
        valid("request.updateChannelMetadata.clearSetTtl", "A write that clears the set's TTL (setTtlMs -1, field 8: "
              "zigzag 1).",
              R("updateChannelMetadata", 12, {"channel": "lobby", "items": [{"key": "topic", "value": "x"}],
                                              "setTtlMs": -1})),
        valid("response.setUserMetadata.setTtl", "The write's answer: the new majorRevision and the set's expiresAtMs "
              "(field 2).",
              S("setUserMetadata", 11, {"majorRevision": 4, "expiresAtMs": T0 + 60000})),
        valid("response.getChannelMetadata.setTtl", "A get answer of a set with a TTL of its own: its expiresAtMs "
              "(field 3).",
              S("getChannelMetadata", 13, {"majorRevision": 4, "items": [{"key": "topic", "value": "x", "revision": 4}],
                                            "expiresAtMs": T0 + 60000})),
        valid("error.invalidTtl.set", "A write's setTtlMs neither -1, 0 nor 100 ms..365 days: 7017 with no key.",
              E("setChannelMetadata", 14, 7017, message="setTtlMs must be -1, 0 or 100-31536000000")),
        valid("error.rateLimited", "Rate limit with retryAfterMs.", E("getUserMetadata", 4, 3000, retryAfterMs=250)),
        valid("error.permissionDenied", "Writing another user's metadata.",
              E("setUserMetadata", 5, 2003, message="may not write metadata of Ann")),
        valid("error.broadcastRateLimited", "A session over its broadcast rate: retry after 20 ms.",
              E("broadcast", 6, 3010, message="over 50 broadcasts a second", retryAfterMs=20)),
        valid("error.malformedBody", "Answer to a request whose body could not be decoded.",
              E("whoNow", 6, 1000, message="wire type 3 is not allowed")),
        valid("error.unknownOperation", "Answer to a request with op 63, which this server does not know: the op is "
              "rendered as a number.", E(63, 7, 1013, message="unknown op 0x3f")),
        valid("error.unknownCode", "An error code this version does not define: no name; clients handle it by its "
              "class (9xxx: unknown class).", E("logout", 8, 9999)),
        valid("error.lockHeld", "acquireLock without retry on a held lock.", E("acquireLock", 9, 6001, key="editor")),
        valid("error.providerTimeout", "Provider did not answer.", E("getGroupMembers", 10, 8003, retryAfterMs=1000)),
    ]
    # edge values
    big_value = "v" * 16384
    vs += [
        valid("edge.requestId.1", "Request id 1.", R("logout", 1)),
        valid("edge.requestId.127", "Largest 1-byte request id.", R("logout", 127)),
        valid("edge.requestId.128", "Smallest 2-byte request id.", R("logout", 128)),
        valid("edge.requestId.16383", "Largest 2-byte request id.", R("logout", 16383)),
        valid("edge.requestId.16384", "Smallest 3-byte request id.", R("logout", 16384)),
        valid("edge.requestId.2^28-1", "Largest 4-byte request id.", R("logout", (1 << 28) - 1)),
        valid("edge.requestId.max", "Request id 2^32-1: 5 bytes ff ff ff ff 0f.", S("logout", (1 << 32) - 1)),
        valid("edge.emptyBody.response", "Empty response body: length 3.", S("subscribeChannel", 5)),
        valid("edge.emptyBody.push", "Push with an empty body: every field has its default.", P("storageEvent")),
        valid("edge.string.emptyUserId", "Empty userId (= the caller) is the default and omitted: empty body.",
              R("getUserMetadata", 3)),
        valid("edge.string.cjk", "CJK channel name and value.",
              R("setChannelMetadata", 4, {"channel": "大厅", "items": [{"key": "主题", "value": "发布会"}]})),
        valid("edge.string.emoji", "4-byte UTF-8 (emoji, with a ZWJ sequence) in a value and a state.",
              R("setState", 5, {"channel": "lobby", "items": [{"key": "mood", "value": "🎉👩\u200d💻"}]})),
        valid("edge.string.nul", "U+0000 is valid UTF-8 and allowed inside a string.",
              R("publishEvent", 6, {"value": 10000, "ext": "a\u0000b"})),
        valid("edge.string.maxItemValue", "An item value of 16384 bytes, the largest allowed.",
              R("setUserMetadata", 7, {"items": [{"key": "blob", "value": big_value}]})),
        valid("edge.string.id64", "A 64-byte channel name and lock name (the largest).",
              R("setLock", 8, {"channel": "c" * 64, "lockName": "l" * 64})),
        valid("edge.uint64.max", "uint64 max in a timestamp: 10 bytes ff ff ff ff ff ff ff ff ff 01.",
              P("serverNotice", {"atMs": (1 << 64) - 1})),
        valid("edge.sint.int64min", "majorRevision = int64 min: zigzag 2^64-1.",
              R("setChannelMetadata", 9, {"channel": "c", "items": [ITEM_NAME], "majorRevision": -(1 << 63)})),
        valid("edge.sint.int64max", "majorRevision = int64 max: zigzag 2^64-2.",
              R("setChannelMetadata", 10, {"channel": "c", "items": [ITEM_NAME], "majorRevision": (1 << 63) - 1})),
        valid("edge.sint.zero", "majorRevision 0 (must not exist) is not the default and is written: 20 00.",
              R("setUserMetadata", 11, {"items": [ITEM_NAME], "majorRevision": 0})),
        valid("edge.sint.minus2", "Item revision -2 (invalid for the server, 7005, but well-formed): zigzag 3.",
              R("setUserMetadata", 12, {"items": [{"key": "Name", "value": "Tony", "revision": -2}]})),
        valid("edge.sint.minus1.omitted", "majorRevision -1 and item revision -1 are the defaults: omitted.",
              R("setUserMetadata", 13, {"items": [ITEM_NAME]})),
        valid("edge.enum.unknownChannelType", "ChannelType 7 is unknown: kept and rendered as a number.",
              R("getLocks", 14, {"channel": "lobby", "channelType": 7})),
        valid("edge.enum.channelTypeZero", "ChannelType 0 has no name and is not the default (message = 1): written.",
              R("getLocks", 15, {"channel": "lobby", "channelType": 0})),
        valid("edge.enum.u32max", "An enum holds any u32: ClientType 4294967295.",
              C("hello", {"protocolVersion": 1, "clientType": (1 << 32) - 1})),
        valid("edge.enum.repeatedUnknown", "A repeated enum with a known and an unknown value.",
              R("registerProvider", 16, {"kinds": ["memberList", 99]})),
        valid("edge.bool.falseOverridesTrueDefault", "withPresence false (default true) is written: 20 00.",
              R("subscribeChannel", 17, {"channel": "lobby", "withPresence": False, "beQuiet": True})),
        valid("edge.bool.publishDefaults", "onlineOnly and multiDeviceSync false; eventType 1 and expiry 604800 omitted.",
              R("publishEvent", 18, {"value": 20000, "onlineOnly": False, "multiDeviceSync": False})),
        valid("edge.defaults.whoNowCountOnly", "includeUserId false: count only.",
              R("whoNow", 19, {"channel": "lobby", "includeUserId": False})),
        valid("edge.nested.empty", "A present but empty nested message is written as tag + length 0 and rendered {}.",
              R("answerProvider", 20, {"providerRequestId": 43, "user": {}})),
        valid("edge.repeated.emptyStrings", "Repeated strings keep empty elements.",
              R("removeState", 21, {"channel": "lobby", "keys": ["", "a", ""]})),
        valid("edge.repeated.10000", "10000 elements in one repeated field: the most allowed.",
              R("subscribeEvent", 22, {"expirySeconds": 60, "publishers": [""] * 10000})),
    ]
    # frames of exactly the edge lengths
    for length in (127, 128, 16383, 16384):
        vs.append(valid("edge.length.%d" % length, "Frame length %d (%d-byte length field)." % (length, len(w.uvarint(length))),
                        padded_request(length)))
    vs.append(valid("edge.length.16384.preHandshake", "A HELLO of length 16384 is accepted before WELCOME (the limit).",
                    padded_hello(16384), limits={"maxFrameSize": 16384, "maxInflatedSize": 16384, "compression": False}))
    # non-canonical input every receiver must accept
    item = fs(1, "Name") + fs(2, "Tony")
    vs += [
        valid("noncanonical.fieldOrder", "Fields in descending order decode the same.", R("getLocks", 30, {"channel": "lobby", "channelType": "stream"}),
              raw=req(23, 30, fv(2, 2) + fs(1, "lobby"))),
        valid("noncanonical.explicitDefaults", "Fields equal to their defaults written anyway (majorRevision -1, "
              "channelType message, withMetadata false, withPresence true).", R("subscribeChannel", 31, {"channel": "lobby"}),
              raw=req(24, 31, fs(1, "lobby") + fv(2, 1) + fv(3, 0) + fv(4, 1))),
        valid("noncanonical.emptyString", "An explicit empty string (0a 00) equals the default: omitted in JSON.",
              R("getUserMetadata", 39), raw=req(13, 39, fs(1, ""))),
        valid("noncanonical.minusOneOnWire", "Explicit majorRevision -1 (20 01) and item revision -1 (18 01).",
              R("setUserMetadata", 32, {"items": [ITEM_NAME]}), raw=req(12, 32, fb(2, item + fv(3, 1)) + fv(3, 1))),
        valid("noncanonical.lastWins", "A singular field twice: the last occurrence wins.",
              R("getUserMetadata", 33, {"userId": "Ann"}), raw=req(13, 33, fs(1, "Bob") + fs(1, "Ann"))),
        valid("noncanonical.lastWinsMessage", "A singular message field twice: the last replaces the first (no merge).",
              R("setUserInfo", 34, {"info": {"userId": "Ann"}}),
              raw=req(40, 34, fb(1, fs(1, "Bob") + fs(2, "Bobby")) + fb(1, fs(1, "Ann")))),
        valid("noncanonical.packedEnum", "A packed repeated enum (one LEN field, concatenated varints) is accepted.",
              R("registerProvider", 35, {"kinds": ["user", "group", 99]}), raw=req(51, 35, fb(1, b"\x01\x02\x63"))),
        valid("noncanonical.packedAndUnpacked", "Packed and unpacked occurrences of one field append in order.",
              R("registerProvider", 36, {"kinds": ["group", "user", "groupMember"]}),
              raw=req(51, 36, fv(1, 2) + fb(1, b"\x01\x03"))),
        valid("noncanonical.emptyPacked", "An empty packed field adds nothing.", R("registerProvider", 37),
              raw=req(51, 37, fb(1, b""))),
        valid("noncanonical.interleavedRepeated", "Other fields between elements of a repeated field.",
              R("removeState", 38, {"channel": "lobby", "keys": ["a", "b"]}),
              raw=req(30, 38, fs(3, "a") + fs(1, "lobby") + fs(3, "b"))),
    ]
    return vs


def frame_length(msg):
    return len(w.split_frame(w.encode(msg), w.Limits(w.ABSOLUTE_MAX_FRAME))[0])


def padded_request(length):
    """A publishEvent request whose length field holds exactly `length`."""
    for n in range(length, -1, -1):
        msg = R("publishEvent", 1, {"value": 10000, "ext": "x" * n})
        if frame_length(msg) == length:
            return msg
    raise AssertionError(length)


def padded_hello(length):
    for n in range(length, -1, -1):
        msg = C("hello", {"protocolVersion": 1, "token": "t" * n})
        if frame_length(msg) == length:
            return msg
    raise AssertionError(length)


# ---------------------------------------------------------------------------------------------- compressed.json

def compressed_file():
    words = ("meeting room status busy free lunch travel focus call back soon later today tomorrow office home "
             "remote desk floor north south east west building").split()
    seed, texts = 12345, []
    for i in range(4):                          # deterministic pseudo-random text: compresses like real data
        out = []
        while sum(len(x) + 1 for x in out) < 4000:
            seed = (seed * 1103515245 + 12345) % (1 << 31)
            out.append(words[seed % len(words)] + ("%d" % (seed % 97) if seed % 5 == 0 else ""))
        texts.append(" ".join(out)[:4000])
    events = [{"eventId": "e-%d" % i, "value": 10000 + i, "publisher": "user-%03d" % i, "timestampMs": T0 + i,
               "expiresAtMs": T0 + 604800000, "ext": texts[i]} for i in range(4)]
    event_push = P("subscribedEvents", {"events": events})
    body_len = len(w.message_parts(event_push)[4])
    items = [{"key": "k%02d" % i, "value": "value number %d of the set" % i, "revision": i + 1, "updateTs": T0 + i,
              "authorUserId": "Tony"} for i in range(40)]
    who = S("whoNow", 3, {"totalOccupancy": 250, "users": [{"userId": "user-%03d" % i} for i in range(100)],
                          "nextPage": "b1.AAAAZA"})
    text = "the quick brown fox jumps over the lazy dog. "
    small = R("getUserMetadata", 9, {"userId": "Tony"})
    exact = R("setUserMetadata", 10, {"items": [{"key": "k", "value": "a" * 591}]})
    assert len(w.message_parts(exact)[4]) == 600, len(w.message_parts(exact)[4])
    vs = [
        valid("compressed.subscribedEvents.16KiB", "A %d-byte subscribedEvents push (four events with 4000-byte ext), "
              "compressed at level 6." % body_len, event_push, compress="auto"),
        valid("compressed.getUserMetadata", "A response with 40 items.",
              S("getUserMetadata", 2, {"majorRevision": 40, "items": items, "userId": "Tony"}), compress="auto"),
        valid("compressed.whoNow", "A whoNow page of 100 users.", who, compress="auto"),
        valid("compressed.request", "Clients may compress requests too once zlib is negotiated.",
              R("setChannelMetadata", 4, {"channel": "lobby", "items": [{"key": "doc", "value": text * 30}]}),
              compress="auto"),
        valid("compressed.error", "An error response with ERROR|COMPRESSED (flags 0x03).",
              E("setChannelMetadata", 5, 7004, message=("metadata set would be %d bytes; " % 20000) * 20),
              compress="auto"),
    ]
    # hand-made streams: other levels and window sizes must be accepted
    for name, desc, level, wbits in (("level0", "Stored (uncompressed) deflate blocks, level 0.", 0, 15),
                                     ("level1", "Level 1.", 1, 15), ("level9", "Level 9.", 9, 15),
                                     ("window512", "A 512-byte window (CINFO 1, header 18 95...).", 9, 9)):
        msg = R("setChannelMetadata", 6, {"channel": "lobby", "items": [{"key": "doc", "value": text * 20}]})
        body = w.message_parts(msg)[4]
        vs.append(valid("compressed.%s" % name, desc + " Receivers accept any valid zlib stream.", msg,
                        raw=req(8, 6, zbody(body, level=level, wbits=wbits), flags=1), compress=True))
    small_body = w.message_parts(small)[4]
    vs.append(valid("compressed.belowThreshold", "A 6-byte body compressed anyway (12 bytes): senders should not, "
                    "receivers must accept it.", small, raw=req(13, 9, zbody(small_body), flags=1), compress=True))
    vs.append(valid("compressed.exactLimit", "Inflated length 600 = maxInflatedSize 600: accepted.", exact,
                    raw=req(12, 10, zbody(w.message_parts(exact)[4]), flags=1), compress=True,
                    limits={"maxFrameSize": 1048576, "maxInflatedSize": 600, "compression": True}))
    push_msg = P("storageEvent", {"storageType": "channel", "target": "lobby",
                                  "majorRevision": 40, "items": items[:20], "publisher": "Tony"})
    vs.append(valid("compressed.storageEvent", "A compressed storage snapshot push.", push_msg, compress="auto"))
    for v in vs:
        assert v["compressed"] and bytes.fromhex(v["hex"])[len(w.uvarint(w.peek_varint(bytes.fromhex(v["hex"]), 0, 4)[0]))] & 1, v["name"]
    return vs


# ---------------------------------------------------------------------------------------------- streams.json

def streams_file():
    hello = C("hello", {"protocolVersion": 1, "features": ["zlib"], "userId": "Tony", "clientType": "desktop"})
    welcome = C("welcome", {"protocolVersion": 1, "features": ["zlib"], "sessionId": "s-1", "userId": "Tony",
                            "maxFrameSize": 1048576, "maxInflatedSize": 1048576, "maxInflight": 128,
                            "heartbeatMs": 15000, "heartbeatMisses": 3, "serverTimeMs": T0, "compressThreshold": 512})
    c2s = [hello, R("subscribeUserMetadata", 1, {"userId": "Ann"}),
           R("setUserMetadata", 2, {"items": [ITEM_NAME], "recordTs": True}),
           C("ping", {"nonce": 7}), R("getUserMetadata", 3), R("logout", 4)]
    snapshot = P("storageEvent", {"target": "Ann", "majorRevision": 3, "items": [
        {"key": "mood", "value": "ok", "revision": 3}], "timestampMs": T0})
    s2c = [welcome, snapshot, S("subscribeUserMetadata", 1), S("setUserMetadata", 2, {"majorRevision": 1}),
           C("pong", {"nonce": 7}), S("getUserMetadata", 3, {"majorRevision": 1, "items": [
               {"key": "Name", "value": "Tony", "revision": 1, "updateTs": T0}], "userId": "Tony"}),
           S("logout", 4), C("goAway", {"lastRequestId": 4, "reason": "logout"})]
    out_of_order = [S("whoNow", 3, {"totalOccupancy": 1, "users": [{"userId": "Ann"}]}), P("serverNotice", {"message": "hi"}),
                    S("getLocks", 1), E("acquireLock", 2, 6001, key="editor")]
    big = S("getUserMetadata", 5, {"majorRevision": 3, "items": [
        {"key": "k%d" % i, "value": "repeated value " * 10, "revision": 3} for i in range(10)]})
    mixed = [C("ping", {"nonce": 1}), big, P(62), C("pong", {"nonce": 2})]
    mixed_raw = w.encode(mixed[0]) + w.encode(big, "auto") + push(62, fs(1, "future")) + w.encode(mixed[3])
    mixed[2] = P(62)
    pings = [C("ping", {"nonce": i}) for i in range(1, 51)]
    return [
        stream("session.c2s", "What a client sends in a short session: HELLO, three requests, a PING, logout.", c2s, "c2s"),
        stream("session.s2c", "The server's side of it. The storage snapshot push arrives BEFORE the response to the "
               "subscribeUserMetadata that caused it: route frames by class, never by position.", s2c, "s2c"),
        stream("outOfOrder", "Responses in a different order than the requests (3, then 1, then 2), a push between them.",
               out_of_order, "s2c"),
        stream("mixed.compressedAndUnknownPush", "A plain frame, a compressed frame, an unknown push code 62 (ignored; "
               "rendered with op 62 and an empty body) and another plain frame.", mixed, "s2c", mixed_raw, True),
        stream("manySmall", "50 PINGs in one read.", pings, "c2s"),
    ]


# ---------------------------------------------------------------------------------------------- malformed.json

def malformed_file():
    ok_body = fs(1, "Tony")                                     # getUserMetadata {userId: "Tony"}
    pre = {"maxFrameSize": 16384, "maxInflatedSize": 16384, "compression": False}
    nozlib = {"maxFrameSize": 1048576, "maxInflatedSize": 1048576, "compression": False}
    text = b"the quick brown fox jumps over the lazy dog. " * 20
    good_stream = zlib.compress(text, 6)
    vs = []
    add = vs.append

    def frame_case(name, desc, raw, code, rid=None, direction="c2s", limits=None):
        add(invalid(name, desc, raw, code, rid, direction, limits))

    # length field (SPEC 2.1)
    frame_case("length.0", "Length 0: shorter than a header.", bytes([0x00]), 1004)
    frame_case("length.1", "Length 1: shorter than a header.", bytes([0x01, 0x00]), 1004)
    frame_case("length.overlong2", "Length 3 written in two bytes (83 00): not minimal.", bytes.fromhex("830000034e"), 1005)
    frame_case("length.overlong4", "Length 3 written in four bytes (83 80 80 00).", bytes.fromhex("83808000000303"), 1005)
    frame_case("length.5bytes", "A fifth length byte (80 80 80 80 01).", bytes.fromhex("808080800100"), 1005)
    frame_case("length.5bytes.max", "ff ff ff ff 0f: five bytes.", bytes.fromhex("ffffffff0f"), 1005)
    frame_case("length.4continuations", "Four bytes all with the continuation bit: invalid at once, whatever follows.",
               bytes.fromhex("ffffffff"), 1005)
    frame_case("length.2^28-1", "Length 268435455 (ff ff ff 7f), the largest a length field holds, over the 1 MiB "
               "limit: refused as soon as the length is read, without waiting for the body.",
               bytes.fromhex("ffffff7f0041"), 1001)
    frame_case("length.overLimit", "Length 1048577 (81 80 40): over the default maxFrameSize; the body never comes.",
               bytes.fromhex("818040004101"), 1001)
    frame_case("length.overPreHandshake", "Length 16385 before WELCOME (limit 16384).",
               bytes.fromhex("818001") + bytes([0x00, 0x01]), 1001, limits=pre)
    frame_case("length.overCustomLimit", "Length 101 with maxFrameSize 100.",
               bytes([101, 0x00, 0x4D, 0x01]) + b"\x00" * 98, 1001,
               limits={"maxFrameSize": 100, "maxInflatedSize": 100, "compression": True})
    frame_case("truncated.body", "Length 10 but the stream ends after 5 bytes.", bytes.fromhex("0a004d010a"), 1011)
    frame_case("truncated.length", "The stream ends inside the length varint (80).", bytes.fromhex("80"), 1011)
    frame_case("truncated.afterValidFrame", "A whole PING, then half a frame.", bytes.fromhex("0400030801") + bytes.fromhex("0500"), 1011)
    # flags (SPEC 2.2)
    frame_case("flags.reserved04", "Reserved flag bit 0x04.", req(13, 1, ok_body, flags=0x04), 1004)
    frame_case("flags.reserved80", "Reserved flag bit 0x80.", ctl(3, b"", flags=0x80), 1004)
    frame_case("flags.errorOnRequest", "ERROR flag on a request.", req(13, 1, ok_body, flags=0x02), 1004)
    frame_case("flags.errorOnControl", "ERROR flag on a PING.", ctl(3, b"", flags=0x02), 1004)
    frame_case("flags.errorOnPush", "ERROR flag on a push.", push(1, b"", flags=0x02), 1004, direction="s2c")
    # type byte (SPEC 2.3)
    frame_case("class.responseFromClient", "A server receives a response-class frame.", resp(13, 1, b""), 1004)
    frame_case("class.pushFromClient", "A server receives a push-class frame.", push(1, b""), 1004)
    frame_case("class.requestFromServer", "A client receives a request-class frame.", req(13, 1, b""), 1004, direction="s2c")
    frame_case("control.unknownOp6", "Unknown control op 6.", ctl(6, b""), 1004)
    frame_case("control.unknownOp0", "Control op 0 (type byte 0x00) is not defined.", ctl(0, b""), 1004, direction="s2c")
    frame_case("control.unknownOp63", "Control op 63.", ctl(63, b""), 1004)
    # request id (SPEC 2.4)
    frame_case("requestId.0", "Request id 0.", req(13, 0, ok_body), 1012)
    frame_case("requestId.2^32", "Request id 2^32 (80 80 80 80 10).", bytes([7, 0, 0x4D]) + bytes.fromhex("8080808010"), 1012)
    frame_case("requestId.2^35-1", "Request id ff ff ff ff 7f: five bytes, over 2^32-1.", bytes([7, 0, 0x4D]) + bytes.fromhex("ffffffff7f"), 1012)
    frame_case("requestId.6bytes", "A six-byte request id.", bytes([8, 0, 0x4D]) + bytes.fromhex("808080808001"), 1005)
    frame_case("requestId.overlong", "Request id 1 written as 81 00.", bytes([4, 0, 0x4D]) + bytes.fromhex("8100"), 1005)
    frame_case("requestId.missing", "A request frame of length 2: no room for the request id.", bytes([2, 0, 0x4D]), 1004)
    frame_case("requestId.runsPastFrame", "The request id varint runs past the end of the frame (80 then the frame ends).",
               bytes([3, 0, 0x4D, 0x80]), 1004)
    frame_case("requestId.0.response", "A client receives a response with request id 0.", resp(13, 0, b""), 1012, direction="s2c")
    # compression (SPEC 4)
    body = w.message_parts(R("getUserMetadata", 1, {"userId": "Tony"}))[4]
    frame_case("zlib.notNegotiated", "COMPRESSED without the zlib feature.", req(13, 1, zbody(body), flags=1), 1003, limits=nozlib)
    frame_case("zlib.preHandshake", "A compressed HELLO: compression is never negotiated before WELCOME.",
               ctl(1, zbody(fv(1, 1)), flags=1), 1003, limits=pre)
    frame_case("zlib.declaredZero", "Inflated length 0.", req(13, 1, w.uvarint(0) + zlib.compress(b""), flags=1), 1002)
    frame_case("zlib.declaredMissing", "COMPRESSED with an empty body: no inflated length.", req(13, 1, b"", flags=1), 1002)
    frame_case("zlib.declaredOverlong", "Inflated length 6 written as 86 00.",
               req(13, 1, bytes.fromhex("8600") + zlib.compress(body), flags=1), 1002)
    frame_case("zlib.declared6bytes", "A six-byte inflated length.",
               req(13, 1, bytes.fromhex("868080808000") + zlib.compress(body), flags=1), 1002)
    frame_case("zlib.declaredOverLimit", "Declares 1048577 bytes (> maxInflatedSize): refused before inflating; the "
               "'stream' is not even looked at.", req(13, 1, w.uvarint(1048577) + b"\x78\x9c", flags=1), 1010)
    frame_case("zlib.declared2^35-1", "Declares 2^35-1 bytes.", req(13, 1, bytes.fromhex("ffffffff7f") + b"\x78\x9c", flags=1), 1010)
    frame_case("zlib.declaredOverCustomLimit", "Declares 601 bytes with maxInflatedSize 600.",
               req(13, 1, w.uvarint(601) + zlib.compress(b"x" * 601), flags=1), 1010,
               limits={"maxFrameSize": 1048576, "maxInflatedSize": 600, "compression": True})
    frame_case("zlib.shorterThanDeclared", "The stream inflates to fewer bytes than declared.",
               req(13, 1, zbody(body, declared=len(body) + 1), flags=1), 1002)
    frame_case("zlib.longerThanDeclared", "The stream inflates to more bytes than declared.",
               req(13, 1, zbody(body, declared=len(body) - 1), flags=1), 1002)
    frame_case("zlib.truncated", "The zlib stream is cut short (last 4 bytes missing).",
               resp(13, 1, w.uvarint(len(text)) + good_stream[:-4], flags=1), 1002, direction="s2c")
    stored = zlib.compress(text, 0)
    frame_case("zlib.truncatedExactSize", "A stored-block stream cut after its data: every declared byte is produced "
               "but the Adler-32 is missing.", resp(13, 1, w.uvarint(len(text)) + stored[:-4], flags=1), 1002,
               direction="s2c")
    frame_case("zlib.trailingBytes", "Two bytes after the end of the zlib stream.",
               resp(13, 1, w.uvarint(len(text)) + good_stream + b"\x00\x00", flags=1), 1002, direction="s2c")
    bad_adler = good_stream[:-1] + bytes([good_stream[-1] ^ 0x01])
    frame_case("zlib.badAdler32", "The Adler-32 checksum is wrong.",
               resp(13, 1, w.uvarint(len(text)) + bad_adler, flags=1), 1002, direction="s2c")
    c = zlib.compressobj(6, zlib.DEFLATED, 15, 8, zlib.Z_DEFAULT_STRATEGY, b"the quick brown fox")
    fdict = c.compress(text) + c.flush()
    frame_case("zlib.presetDictionary", "FDICT set (the stream needs a preset dictionary).",
               resp(13, 1, w.uvarint(len(text)) + fdict, flags=1), 1002, direction="s2c")
    raw_deflate = zlib.compressobj(6, zlib.DEFLATED, -15)
    raw_deflate = raw_deflate.compress(text) + raw_deflate.flush()
    frame_case("zlib.rawDeflate", "Raw DEFLATE (RFC 1951) without the zlib header and Adler-32: what Apple's "
               "Compression framework produces.", req(8, 1, w.uvarint(len(text)) + raw_deflate, flags=1), 1002)
    gz = zlib.compressobj(6, zlib.DEFLATED, 31)
    gz = gz.compress(text) + gz.flush()
    frame_case("zlib.gzip", "A gzip (RFC 1952) stream instead of zlib.", req(8, 1, w.uvarint(len(text)) + gz, flags=1), 1002)
    frame_case("zlib.badHeader", "zlib header 78 9d: the FCHECK bits are wrong.",
               req(8, 1, w.uvarint(len(text)) + b"\x78\x9d" + good_stream[2:], flags=1), 1002)
    frame_case("zlib.badBlockType", "A deflate block of the reserved type 3.",
               req(8, 1, w.uvarint(5) + b"\x78\x9c\x07\x00\x00\x00\x00", flags=1), 1002)
    bomb = zlib.compress(b"\x00" * (16 << 20), 9)
    frame_case("zlib.bomb", "Declares 1048576 bytes (the limit) but inflates to 16 MiB of zeros: the receiver stops "
               "after 1048577 bytes.", push(4, w.uvarint(1 << 20) + bomb, flags=1), 1002, direction="s2c")
    bad_body = w.uvarint(11) + zlib.compress(fs(1, "Tony") + bytes([0x1B, 0x00, 0x0C, 0x00, 0x00]))
    frame_case("zlib.inflatedBodyMalformed", "A compressed request whose inflated body has wire type 3: answered with "
               "an error response, the connection stays.", req(13, 5, bad_body, flags=1), 1000, 5)
    # request bodies (SPEC 3): answered with an error response, connection stays
    body_cases = [
        ("wireType3", "Wire type 3 (start group).", bytes([0x0B]) + b"\x00", 1000),
        ("wireType4", "Wire type 4 (end group).", bytes([0x0C]), 1000),
        ("wireType6", "Wire type 6.", bytes([0x0E, 0x00]), 1000),
        ("wireType7", "Wire type 7.", bytes([0x0F, 0x00]), 1000),
        ("fieldNumber0", "Field number 0 (tag 02).", bytes([0x02, 0x00]), 1000),
        ("fieldNumberTooLarge", "Field number 2^29 (tag 80 80 80 80 10).", bytes.fromhex("808080801000"), 1000),
        ("tagOverlong", "Tag 0x0a written as 8a 00.", bytes.fromhex("8a0004546f6e79"), 1000),
        ("stringPastEnd", "A string length running past the body.", bytes.fromhex("0a05546f6e79"), 1000),
        ("stringLengthHuge", "A string length of 2^63.", bytes.fromhex("0a80808080808080808001"), 1000),
        ("varintTruncated", "A varint cut by the end of the body.", bytes.fromhex("0aff"), 1000),
        ("varint11bytes", "An 11-byte varint in an unknown field.", bytes.fromhex("78" + "80" * 10 + "00"), 1000),
        ("varintOverflow", "A 10-byte varint whose last byte is 02 (over 64 bits).", bytes.fromhex("78" + "ff" * 9 + "02"), 1000),
        ("varintOverlong", "Value 1 written as 81 00 in an unknown field.", bytes.fromhex("788100"), 1000),
        ("fixed64PastEnd", "An unknown fixed64 field with 3 bytes left.", bytes.fromhex("79010203"), 1000),
        ("fixed32PastEnd", "An unknown fixed32 field with 2 bytes left.", bytes.fromhex("7d0102"), 1000),
        ("wrongWireTypeString", "userId (a string) sent as a varint.", bytes.fromhex("0801"), 1000),
        ("wrongWireTypeFixed", "userId sent as fixed32.", bytes.fromhex("0d01020304"), 1000),
        ("utf8.loneContinuation", "Invalid UTF-8: a lone continuation byte.", bytes.fromhex("0a0254") + b"\x80", 1006),
        ("utf8.overlong", "Invalid UTF-8: overlong encoding of '/' (c0 af).", bytes.fromhex("0a02c0af"), 1006),
        ("utf8.surrogate", "Invalid UTF-8: an encoded surrogate (ed a0 80).", bytes.fromhex("0a03eda080"), 1006),
        ("utf8.aboveMax", "Invalid UTF-8: a code point above U+10FFFF (f4 90 80 80).", bytes.fromhex("0a04f4908080"), 1006),
        ("utf8.truncated", "Invalid UTF-8: a 3-byte sequence cut after 2 bytes.", bytes.fromhex("0a02e4b8"), 1006),
        ("utf8.ff", "Invalid UTF-8: byte ff.", bytes.fromhex("0a01ff"), 1006),
    ]
    for name, desc, raw, code in body_cases:
        frame_case("body.%s" % name, desc + " (getUserMetadata request, id 7.)", req(13, 7, raw), code, 7)
    frame_case("body.boolNot01", "A bool holding 2 (subscribeChannel withMetadata).", req(24, 8, fs(1, "c") + fv(3, 2)), 1000, 8)
    frame_case("body.enumOver32bits", "An enum value of 2^32 (channelType).", req(23, 9, fs(1, "c") + fv(2, 1 << 32)), 1000, 9)
    frame_case("body.nestedPastEnd", "A nested message whose length runs past the body.",
               req(12, 10, bytes.fromhex("1220") + fs(1, "k")), 1000, 10)
    frame_case("body.nestedMalformed", "Wire type 3 inside a nested MetadataItem.",
               req(12, 11, fb(2, fs(1, "k") + b"\x1b")), 1000, 11)
    frame_case("body.nestedUtf8", "Invalid UTF-8 in a nested MetadataItem key.", req(12, 12, fb(2, fb(1, b"\xc3"))), 1006, 12)
    frame_case("body.packedTruncated", "A packed enum whose last varint is cut by the end of the LEN field.",
               req(51, 13, fb(1, b"\x01\x81")), 1000, 13)
    frame_case("body.packedOver32bits", "A packed enum element of 2^32.", req(51, 14, fb(1, w.uvarint(1 << 32))), 1000, 14)
    frame_case("body.repeated10001", "10001 elements in one repeated field (the limit is 10000).",
               req(32, 15, fv(2, 60) + fs(4, "") * 10001), 1000, 15)
    frame_case("body.packed10001", "10001 elements in one packed enum field.", req(51, 16, fb(1, b"\x01" * 10001)), 1000, 16)
    frame_case("body.utf8InRepeated", "Invalid UTF-8 in the second element of a repeated string.",
               req(41, 17, fs(1, "ok") + fb(1, b"\xe2\x82")), 1006, 17)
    # bodies of other classes
    frame_case("body.control.hello", "A malformed HELLO body (clientType 2^32): control frames get GOAWAY.",
               ctl(1, fv(1, 1) + fv(5, 1 << 32)), 1000)
    frame_case("body.control.pingTruncated", "A PING whose nonce varint is cut short.", ctl(3, b"\x08\x80"), 1000)
    frame_case("body.push", "A malformed push body (wire type 3): fatal for the client.", push(3, b"\x0b"), 1000, direction="s2c")
    frame_case("body.push.utf8", "Invalid UTF-8 in a push.", push(7, fb(2, b"\xff")), 1006, direction="s2c")
    frame_case("body.response", "A malformed response body: the client fails request 21 alone.",
               resp(13, 21, b"\x0b"), 1000, 21, direction="s2c")
    frame_case("body.errorResponse.utf8", "Invalid UTF-8 in an error response's message: request 22 fails with 1006.",
               resp(13, 22, fv(1, 5000) + fb(2, b"\xc0"), flags=2), 1006, 22, direction="s2c")
    frame_case("response.unknownOp", "A success response with op 63, which the client never sent.",
               resp(63, 23, b""), 1013, 23, direction="s2c")
    # session rules (SPEC 5): a server's checks on the frames a client sends. Every HELLO the server gets to parse
    # names a user and has no token, as a server in open development mode accepts (SPEC 5.3-2), so the vectors
    # can be replayed against a live server (SPEC 10.2), except those marked replayable: false.
    hello = w.encode(C("hello", {"protocolVersion": 1, "features": ["zlib"], "userId": VECTOR_USER}))
    hello_plain = w.encode(C("hello", {"protocolVersion": 1, "userId": VECTOR_USER}))
    unanswered = (" Holds only while no request is answered (a session model): a live server answers the earlier "
                  "requests at once, so this vector is not replayable against one.")

    def session_case(name, desc, raw, code, rid=None, replayable=True):
        add(invalid(name, desc if replayable else desc + unanswered, raw, code, rid, "c2s", None, "session",
                    replayable))

    session_case("session.firstFrameRequest", "The first frame is a request, not HELLO.", w.encode(R("logout", 1)), 1007)
    session_case("session.firstFrameUnknownOp", "The first frame is a request with an unknown op: still 1007, not "
                 "1013.", req(63, 1, b""), 1007)
    session_case("session.firstFramePing", "The first frame is a PING.", w.encode(C("ping")), 1007)
    session_case("session.helloTwice", "HELLO twice.", hello + hello, 1007)
    session_case("session.version2", "protocolVersion 2.",
                 w.encode(C("hello", {"protocolVersion": 2, "userId": VECTOR_USER})), 1008)
    session_case("session.versionMissing", "protocolVersion absent (0).", w.encode(C("hello", {"userId": VECTOR_USER})),
                 1008)
    session_case("session.welcomeFromClient", "A client sends WELCOME.", hello + w.encode(C("welcome", {"protocolVersion": 1})), 1004)
    session_case("session.helloTooLarge", "A 16385-byte HELLO (pre-handshake limit 16384).",
                 w.encode(C("hello", {"protocolVersion": 1, "token": "t" * 16379})), 1001)
    session_case("session.helloCompressed", "A compressed HELLO.", ctl(1, zbody(fv(1, 1) + fs(3, "t" * 600)), flags=1), 1003)
    session_case("session.compressedWithoutZlib", "A compressed request after a HELLO that did not offer zlib.",
                 hello_plain + req(13, 1, zbody(body), flags=1), 1003)
    session_case("session.duplicateRequestId", "Request id 5 again while the first request 5 is unanswered.",
                 hello + w.encode(R("getLocks", 5, {"channel": "a"})) + w.encode(R("getLocks", 5, {"channel": "b"})), 1014, 5,
                 replayable=False)
    session_case("session.duplicateBeforeBody", "Request id 5 again, with a malformed body: the in-flight check comes "
                 "before the body is decoded (SPEC 5.4), so the answer is 1014, not 1000.",
                 hello + w.encode(R("getLocks", 5, {"channel": "a"})) + req(23, 5, b"\x0b"), 1014, 5, replayable=False)
    many = b"".join(w.encode(R("logout", i)) for i in range(1, 130))
    session_case("session.tooManyInflight", "129 unanswered requests; maxInflight is 128.", hello + many, 3001, 129,
                 replayable=False)
    return vs


# ---------------------------------------------------------------------------------------------- unknown.json

def unknown_file():
    vs = []
    getmeta = R("getUserMetadata", 1, {"userId": "Tony"})
    base = fs(1, "Tony")
    vs += [
        valid("unknownField.varint", "Unknown field 15 (varint) in a request: skipped.", getmeta, raw=req(13, 1, base + fv(15, 300))),
        valid("unknownField.len", "Unknown field 16 (LEN) holding bytes that are not UTF-8: skipped unread.", getmeta,
              raw=req(13, 1, fb(16, b"\xff\xfe\x00") + base)),
        valid("unknownField.fixed64", "Unknown field 17 with wire type 1 (8 bytes): skipped.", getmeta,
              raw=req(13, 1, base + tag(17, 1) + bytes(range(8)))),
        valid("unknownField.fixed32", "Unknown field 18 with wire type 5 (4 bytes): skipped.", getmeta,
              raw=req(13, 1, tag(18, 5) + b"\x01\x02\x03\x04" + base)),
        valid("unknownField.maxNumber", "Unknown field 2^29-1 (the largest field number).", getmeta,
              raw=req(13, 1, base + tag((1 << 29) - 1, 0) + b"\x01")),
        valid("unknownField.nested", "Unknown field 9 inside a nested MetadataItem.",
              R("setUserMetadata", 2, {"items": [ITEM_NAME]}),
              raw=req(12, 2, fb(2, fs(1, "Name") + fs(9, "future") + fs(2, "Tony")))),
        valid("unknownField.hello", "A future HELLO field 20: skipped.", C("hello", {"protocolVersion": 1, "features": ["zlib"]}),
              raw=ctl(1, fv(1, 1) + fs(2, "zlib") + fs(20, "resume-token"))),
        valid("unknownField.welcome", "A future WELCOME field 30.", C("welcome", {"protocolVersion": 1}),
              raw=ctl(2, fv(1, 1) + fv(30, 5))),
        valid("unknownField.response", "A future response field.", S("publishEvent", 3, {"eventId": "e-9"}),
              raw=resp(34, 3, fs(1, "e-9") + fb(9, b"x"))),
        valid("unknownField.push", "A future push field.", P("serverNotice", {"message": "hi"}),
              raw=push(7, fs(2, "hi") + fv(10, 1))),
        valid("unknownField.errorBody", "A future ErrorBody field.", E("getLocks", 4, 4000, message="none"),
              raw=resp(23, 4, fv(1, 4000) + fs(2, "none") + fs(6, "detail"), flags=2)),
        valid("unknownPush.empty", "Push code 62, unknown: ignored, rendered with its number.", P(62)),
        valid("unknownPush.body", "Push code 40 with a body: ignored without parsing the body.", P(40),
              raw=push(40, fs(1, "future") + fv(2, 7))),
        valid("unknownPush.garbage", "Push code 63 whose body would not even parse (wire type 3): still ignored.",
              P(63), raw=push(63, b"\x0b\x0c\xff")),
        valid("unknownEnum.hello", "HELLO with clientType 99 (unknown): kept.", C("hello", {"protocolVersion": 1, "clientType": 99})),
        valid("unknownEnum.storageEvent", "A storage event with storageType 9 and eventType 12.",
              P("storageEvent", {"storageType": 9, "eventType": 12, "target": "x"})),
        valid("unknownFeature", "Unknown feature names in HELLO are ignored by the server (they are just strings).",
              C("hello", {"protocolVersion": 1, "features": ["zlib", "push.batch", "grease.0a0a"]})),
        valid("unknownErrorCode", "An error code this version does not define.", E("setLock", 5, 7999, message="new rule")),
        valid("errorForUnknownOp", "The server's answer to unknown op 63: ERROR flag, same op and request id.",
              E(63, 6, 1013, message="unknown op 0x3f")),
    ]
    for op, rid in ((63, 7), (0, 8), (3, 9), (31, 10), (38, 11)):
        vs.append(invalid("unknownOp.%d" % op, "A request with op %d, which v1 does not define: answered with error "
                          "1013 (same op and request id); the connection stays open. The body is not parsed." % op,
                          req(op, rid, fs(1, "x")), 1013, rid))
    return vs


def write(name, comment, vectors):
    path = os.path.join(OUT, name)
    with open(path, "w", encoding="utf-8") as f:
        json.dump({"comment": comment, "vectors": vectors}, f, ensure_ascii=False, indent=1)
        f.write("\n")
    print("wrote %s: %d vectors" % (os.path.relpath(path), len(vectors)))


def main():
    os.makedirs(OUT, exist_ok=True)
    common = " Generated by Protocol/reference/make_vectors.py; format in Protocol/vectors/README.md."
    write("frames.json", "Valid frames, one request and one response for every op, every control frame, every push, "
          "error responses, edge values and non-canonical input receivers must accept." + common, frames_file())
    write("compressed.json", "Compressed frames (zlib feature negotiated). Decoding must give 'message'; re-encoding "
          "need not give the same bytes." + common, compressed_file())
    write("streams.json", "Several frames in one byte stream; decoders must give the same messages whether the bytes "
          "arrive at once or one at a time." + common, streams_file())
    write("malformed.json", "Input a receiver must refuse, with the error code, request id and connection fate of "
          "SPEC.md section 12." + common, malformed_file())
    write("unknown.json", "Forward compatibility: unknown fields are skipped, unknown pushes ignored, unknown enum "
          "values kept, unknown request ops answered with 1013." + common, unknown_file())


if __name__ == "__main__":
    main()
