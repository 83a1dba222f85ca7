"""The Python client against a live gateway: login on both transports and both auth modes, every area through the
typed methods, typed errors, timeouts, compression, heartbeats, the in-flight limit, TLS, reconnects and logout."""
from __future__ import annotations

import asyncio
import json
import os
import ssl
import subprocess
import time
from typing import Any, Dict, List, Tuple

import pytest
from gateway import SECRET, Gateway

import switchboard
from switchboard import (Client, ClientClosed, ConnectFailed, ConnectionEvent, ErrorCode, GoAwayError, Operations,
                         ReconnectPolicy, RequestTimeout, ServerError, SwitchboardError, TLSFailed, wire)

FAST = ReconnectPolicy(initial_delay=0.1, max_delay=0.5, jitter=0.1)


def run(coroutine: Any) -> Any:
    """Runs a test's coroutine; a hang fails it after 90 s instead of blocking the run."""
    return asyncio.run(asyncio.wait_for(coroutine, 90))


# ------------------------------------------------------------------------------------------------ login


def test_login_over_tcp_and_unix_socket_in_open_mode(open_gateway: Gateway) -> None:
    async def main() -> None:
        for endpoint in (open_gateway.tcp, open_gateway.unix, ("127.0.0.1", open_gateway.port)):
            async with Client(endpoint, "tony") as client:
                welcome = client.welcome
                assert welcome is not None
                assert welcome["userId"] == "tony" and welcome["protocolVersion"] == 1 and welcome["isAdmin"]
                assert welcome["features"] == ["zlib"]
                assert await client.ping() < 5
                assert (await client.get_user_metadata())["userId"] == "tony"
    run(main())


def test_token_login_over_both_transports_and_refusals(token_gateway: Gateway) -> None:
    async def main() -> None:
        token = token_gateway.token("ana")
        for endpoint in (token_gateway.tcp, token_gateway.unix):
            async with Client(endpoint, token=token) as client:
                assert client.welcome is not None and client.welcome["userId"] == "ana"
                assert not client.welcome["isAdmin"]
        provided: List[str] = []

        async def provider() -> str:
            provided.append(token_gateway.token("bob"))
            return provided[-1]
        async with Client(token_gateway.tcp, token_provider=provider) as client:
            assert client.welcome is not None and client.welcome["userId"] == "bob" and len(provided) == 1
        with pytest.raises(GoAwayError) as refused:
            await Client(token_gateway.tcp, "ana").connect()
        assert refused.value.code == ErrorCode.notAuthenticated
        with pytest.raises(GoAwayError) as forged:
            await Client(token_gateway.unix, token="not.a-token.at-all").connect()
        assert forged.value.code == ErrorCode.invalidToken and forged.value.kind == "goAway"
    run(main())


def test_token_expiring_soon_is_renewed_from_the_token_provider(token_gateway: Gateway) -> None:
    async def main() -> None:
        ttls = ["20s", "1h"]                              # the first expires within the server's 60 s notice lead

        async def provider() -> str:
            return token_gateway.token("tina", ttl=ttls.pop(0) if len(ttls) > 1 else ttls[0])
        client = Client(token_gateway.tcp, token_provider=provider, reconnect=ReconnectPolicy.never())
        events, notices = client.connection_events(), client.pushes("serverNotice")
        await client.connect()
        notice = await notices.next(5)
        assert notice.body["code"] == ErrorCode.tokenExpired and notice.body["atMs"] > 0
        while True:
            event = await events.next(5)
            if event.kind != "connected":
                break
        assert event.kind == "tokenRenewed", event
        assert (await client.get_user_metadata())["userId"] == "tina"
        await client.logout()
    run(main())


def test_connect_failures_say_why(open_gateway: Gateway) -> None:
    async def main() -> None:
        with pytest.raises(ConnectFailed, match="connection refused"):
            await Client(("127.0.0.1", 1), "tony").connect()
        with pytest.raises(ConnectFailed, match="no such socket file"):
            await Client("unix:/nonexistent/sb.sock", "tony").connect()
    run(main())


# ------------------------------------------------------------------------------------------------ every area


def test_typed_methods_cover_every_area(open_gateway: Gateway) -> None:
    async def main() -> None:
        async with Client(open_gateway.tcp, "tony") as tony, Client(open_gateway.unix, "ana") as ana:
            # storage, with revisions and CAS
            assert (await tony.set_user_metadata(items=[{"key": "city", "value": "Rome"}]))["majorRevision"] == 1
            assert (await tony.update_user_metadata(items=[{"key": "city", "value": "Oslo", "revision": 1}])
                    )["majorRevision"] == 2
            with pytest.raises(ServerError) as cas:
                await tony.set_user_metadata(items=[{"key": "city", "value": "Lima"}], major_revision=1)
            assert cas.value.code == ErrorCode.revisionConflict and cas.value.body["currentRevision"] == 2
            mine = await tony.get_user_metadata()
            assert [(i["key"], i["value"], i["revision"]) for i in mine["items"]] == [("city", "Oslo", 2)]
            await tony.set_channel_metadata("area", items=[{"key": "topic", "value": "t"}], record_ts=True)
            got = await ana.get_channel_metadata("area")
            assert got["majorRevision"] == 1 and got["items"][0]["updateTs"] > 0
            # locks
            await tony.set_lock("area", "mic", ttl_seconds=30)
            await tony.acquire_lock("area", "mic")
            assert (await ana.get_locks("area"))["locks"][0]["owner"] == "tony"
            await tony.release_lock("area", "mic")
            await tony.remove_lock("area", "mic")
            assert (await ana.get_locks("area"))["locks"] == []
            # channels and presence
            await tony.subscribe_channel("area")
            await ana.subscribe_channel("area", with_presence=False)
            await ana.set_state("area", items=[{"key": "mood", "value": "ok"}])
            who = await tony.who_now("area", include_user_id=True, include_state=True)
            assert who["totalOccupancy"] == 2
            assert sorted(u["userId"] for u in who["users"]) == ["ana", "tony"]
            assert (await tony.get_state("area", user_id="ana"))["items"] == [{"key": "mood", "value": "ok"}]
            where = await tony.where_now(user_id="ana")
            assert where["channels"] == [{"channel": "area", "channelType": "message"}]
            await ana.remove_state("area", keys=["mood"])
            await ana.unsubscribe_channel("area")
            # events
            events = tony.pushes("subscribedEvents")
            assert (await tony.subscribe_event(3600, publishers=["ana"]))["failedPublishers"] == []
            published = await ana.publish_event(10_042, ext="x")
            push = await events.next(5)
            assert push.body["events"][0]["eventId"] == published["eventId"]
            assert push.body["events"][0]["value"] == 10_042
            # profiles
            await tony.set_user_info({"userId": "tony", "name": "Tony"})
            users = await ana.get_user_info(user_ids=["tony", "zed"])
            assert [u["name"] for u in users["users"]] == ["Tony"] and users["missing"] == ["zed"]
            await tony.set_group_info({"groupId": "g1", "name": "G"})
            assert (await tony.update_group_members("g1", add=["tony", "ana"]))["memberCount"] == 2
            await tony.set_group_member_info({"groupId": "g1", "userId": "ana", "nickname": "A"})
            members = await ana.get_group_member_info("g1", user_ids=["ana"])
            assert members["members"][0]["nickname"] == "A"
            assert (await tony.clear_profile(kind="user", id="tony"))["removed"] >= 1
    run(main())


def test_a_provider_answers_the_directorys_misses_and_is_registered_again_after_a_restart(
        fresh_gateway: Gateway) -> None:
    async def main() -> None:
        async with Client(fresh_gateway.unix, "dir", reconnect=FAST) as provider, \
                Client(fresh_gateway.tcp, "tony", reconnect=FAST) as tony:
            requests, events = provider.pushes("providerRequest"), provider.connection_events()

            async def answer(count: int) -> None:
                for _ in range(count):
                    request = (await requests.next(10)).body
                    await provider.answer_provider(request["providerRequestId"], found=True, user={
                        "userId": request["id"], "name": request["id"].upper()})
            await provider.register_provider(kinds=["user"])
            answering = asyncio.ensure_future(answer(1))
            assert [u["name"] for u in (await tony.get_user_info(user_ids=["zed"]))["users"]] == ["ZED"]
            await answering
            await asyncio.get_running_loop().run_in_executor(None, fresh_gateway.restart)
            while (event := await events.next(20)).kind != "restored":
                pass
            assert [op for op, _ in event.restored] == ["registerProvider"]
            answering = asyncio.ensure_future(answer(1))
            assert [u["name"] for u in (await tony.get_user_info(user_ids=["amy"], timeout=20))["users"]] == ["AMY"]
            await answering
    run(main())


def test_every_operation_of_the_schema_has_a_typed_method() -> None:
    calls: List[Tuple[str, Dict[str, Any]]] = []

    class Recorder(Operations):
        async def call(self, op: str, body: Dict[str, Any], *, timeout: Any = None) -> Dict[str, Any]:
            calls.append((op, body))
            return {}

    samples = {"string": "s", "uint": 1, "sint": -1, "bool": True}
    recorder = Recorder()
    for op in wire.SCHEMA["operations"]:
        name = op["name"]
        method_name = "".join("_" + c.lower() if c.isupper() else c for c in name)
        fields = wire.op_fields(op, "request")
        args = [samples.get(f["type"], {}) for f in fields if f.get("req")]
        run(getattr(recorder, method_name)(*args))
        assert calls[-1][0] == name
        assert set(calls[-1][1]) == {f["name"] for f in fields if f.get("req")}
    assert len(calls) == len(wire.SCHEMA["operations"])
    # the optional fields are keyword arguments, snake_case, sent under their wire names
    run(recorder.set_channel_metadata("c", channel_type="stream", major_revision=3, record_user_id=False))
    assert calls[-1] == ("setChannelMetadata", {"channel": "c", "channelType": "stream", "majorRevision": 3,
                                                 "recordUserId": False})


# ------------------------------------------------------------------------------------------------ errors


def test_error_response_raises_server_error_with_the_wire_code(open_gateway: Gateway) -> None:
    async def main() -> None:
        async with Client(open_gateway.tcp, "tony") as tony, Client(open_gateway.tcp, "ana") as ana:
            await tony.set_lock("errs", "mic", ttl_seconds=30)
            await tony.acquire_lock("errs", "mic")
            with pytest.raises(ServerError) as held:
                await ana.acquire_lock("errs", "mic")
            error = held.value
            assert isinstance(error, SwitchboardError)
            assert error.code == ErrorCode.lockHeld and int(error.code) == 6001 and error.name == "lockHeld"
            assert error.error_class == "lock" and error.kind == "server"
            assert error == SwitchboardError(6001)
            assert (await ana.get_locks("errs"))["locks"][0]["owner"] == "tony"   # the connection stays open
            with pytest.raises(wire.JsonError):
                await ana.call("whoNow", {"channel": 5})                         # refused before sending
    run(main())


def test_timed_out_request_keeps_its_id_until_the_late_answer(open_gateway: Gateway) -> None:
    async def main() -> None:
        async with Client(open_gateway.tcp, "tony") as tony, Client(open_gateway.tcp, "ana") as ana:
            await tony.set_lock("wait", "mic", ttl_seconds=30)
            await tony.acquire_lock("wait", "mic")
            started = time.monotonic()
            with pytest.raises(RequestTimeout) as timed_out:
                await ana.acquire_lock("wait", "mic", retry=True, timeout=0.3)
            assert timed_out.value.code == 8003 and time.monotonic() - started < 2
            connection = ana.connection
            assert connection is not None and len(connection._pending) == 1     # still in flight (SB-2.4-4)
            await tony.release_lock("wait", "mic")                                 # ana's waiting acquire is answered
            for _ in range(50):
                if not connection._pending:
                    break
                await asyncio.sleep(0.05)
            assert not connection._pending
            assert (await ana.get_locks("wait"))["locks"][0]["owner"] == "ana"
    run(main())


# ------------------------------------------------------------------------------------------------ transport


def test_large_push_arrives_compressed_only_with_zlib(open_gateway: Gateway) -> None:
    async def main() -> None:
        value = "compress me " * 800
        async with Client(open_gateway.tcp, "tony") as tony, Client(open_gateway.unix, "ana") as ana, \
                Client(open_gateway.tcp, "bob", compression=False) as bob:
            assert bob.welcome is not None and bob.welcome["features"] == []
            streams = {}
            for client in (ana, bob):
                streams[client.user_id] = client.pushes("storageEvent")
                await client.subscribe_channel("zip", with_metadata=True, with_presence=False)
                assert (await streams[client.user_id].next(5)).body["eventType"] == "snapshot"
            await tony.set_channel_metadata("zip", items=[{"key": "k", "value": value}])
            zipped, plain = await streams["ana"].next(5), await streams["bob"].next(5)
            assert zipped.compressed and zipped.body["items"][0]["value"] == value
            assert not plain.compressed and plain.body["items"][0]["value"] == value
            assert ana.stats.compressed_frames_received >= 1 and bob.stats.compressed_frames_received == 0
            assert tony.stats.compressed_frames_sent == 1                      # the large request went compressed
    run(main())


def test_idle_client_sends_heartbeats_and_keeps_its_session() -> None:
    gateway = Gateway(extra=["--heartbeat-ms", "1000", "--heartbeat-misses", "2"]).start()
    try:
        async def main() -> None:
            async with Client(gateway.tcp, "tony", reconnect=ReconnectPolicy.never()) as client:
                assert client.welcome is not None and client.welcome["heartbeatMs"] == 1000
                events = client.connection_events()
                await asyncio.sleep(3.5)                  # the server cuts a session silent for 2 s
                assert client.state == "connected" and client.stats.pings_sent >= 3
                with pytest.raises(asyncio.TimeoutError):
                    await events.next(0)
                assert (await client.get_user_metadata())["userId"] == "tony"
        run(main())
    finally:
        gateway.remove()


def test_requests_beyond_max_inflight_wait_for_a_slot() -> None:
    gateway = Gateway(extra=["--max-inflight", "2"]).start()
    try:
        async def main() -> None:
            async with Client(gateway.unix, "tony") as tony, Client(gateway.tcp, "ana") as ana:
                assert ana.welcome is not None and ana.welcome["maxInflight"] == 2
                answers = await asyncio.gather(*[ana.get_user_metadata() for _ in range(40)])
                assert all(a["userId"] == "ana" for a in answers)
                for name in ("l1", "l2", "l3"):
                    await tony.set_lock("q", name, ttl_seconds=30)
                    await tony.acquire_lock("q", name)
                # three waiting acquires: two go on the wire and wait there, the third waits for a slot (the
                # server would answer a third one in flight with 3001 tooManyInflight)
                outcomes = await asyncio.gather(*[ana.acquire_lock("q", name, retry=True, timeout=1.0)
                                                  for name in ("l1", "l2", "l3")], return_exceptions=True)
                assert [type(o) for o in outcomes] == [RequestTimeout] * 3, outcomes
                for name in ("l1", "l2"):
                    await tony.release_lock("q", name)       # the two waiting on the wire are answered
                assert (await ana.get_user_metadata(timeout=5))["userId"] == "ana"
        run(main())
    finally:
        gateway.remove()


def test_tls_with_a_trusted_certificate_and_a_refused_one(tmp_path: Any) -> None:
    cert, key = str(tmp_path / "cert.pem"), str(tmp_path / "key.pem")
    subprocess.run(["openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-keyout", key, "-out", cert,
                    "-days", "2", "-subj", "/CN=localhost", "-addext", "subjectAltName=DNS:localhost,IP:127.0.0.1"],
                   check=True, capture_output=True)
    gateway = Gateway(extra=["--tls-cert", cert, "--tls-key", key]).start()
    try:
        async def main() -> None:
            trusting = ssl.create_default_context(cafile=cert)
            async with Client(gateway.tcp, "tony", tls=trusting) as client:
                assert (await client.get_user_metadata())["userId"] == "tony"
            with pytest.raises(TLSFailed, match="not trusted"):
                await Client(gateway.tcp, "tony", tls=True).connect()
            with pytest.raises(SwitchboardError):
                await Client(gateway.tcp, "tony", reconnect=ReconnectPolicy.never()).connect()
        run(main())
    finally:
        gateway.remove()


# ------------------------------------------------------------------------------------------------ sessions


def test_reconnect_after_gateway_restart_restores_subscriptions(fresh_gateway: Gateway) -> None:
    async def main() -> None:
        async with Client(fresh_gateway.unix, "ana", reconnect=FAST) as ana, \
                Client(fresh_gateway.tcp, "tony", reconnect=FAST) as tony:
            events, pushes = ana.connection_events(), ana.pushes("storageEvent", "profileChanged")
            await ana.subscribe_channel("lobby", with_metadata=True, with_presence=False)
            await ana.subscribe_profiles(user_ids=["tony"])
            assert (await pushes.next(5)).body["eventType"] == "snapshot"
            first = ana.welcome
            assert first is not None
            loop = asyncio.get_running_loop()
            await loop.run_in_executor(None, fresh_gateway.stop)
            # a request made while the gateway is down waits for the next session
            waiting = asyncio.ensure_future(tony.get_user_metadata(timeout=20))
            await asyncio.sleep(0.5)
            assert not waiting.done()
            await loop.run_in_executor(None, fresh_gateway.start)
            assert (await waiting)["userId"] == "tony"
            seen: List[ConnectionEvent] = []
            while not seen or seen[-1].kind != "restored":
                seen.append(await events.next(20))
            kinds = [e.kind for e in seen]
            assert kinds[0] == "disconnected" and seen[0].will_reconnect
            assert isinstance(seen[0].error, GoAwayError) and seen[0].error.code == ErrorCode.shuttingDown
            assert "reconnecting" in kinds and kinds[-2:] == ["connected", "restored"]
            assert [op for op, _ in seen[-1].restored] == ["subscribeChannel", "subscribeProfiles"]
            assert ana.welcome is not None and ana.welcome["sessionId"] != first["sessionId"]
            snapshot = await pushes.next(5)                        # the restored subscription's snapshot
            assert snapshot.body["eventType"] == "snapshot"
            await tony.set_channel_metadata("lobby", items=[{"key": "topic", "value": "again"}])
            change = await pushes.next(5)
            assert change.body["eventType"] == "set" and change.body["items"][0]["value"] == "again"
            await tony.set_user_info({"userId": "tony", "name": "T"})
            assert (await pushes.next(5)).body["id"] == "tony"
    run(main())


def test_logout_reads_the_goaway_and_ends_the_client(open_gateway: Gateway) -> None:
    async def main() -> None:
        client = Client(open_gateway.tcp, "lou")         # a user of its own: nothing to push to it
        await client.connect()
        events, pushes = client.connection_events(), client.pushes()
        await client.get_user_metadata()
        connection = client.connection
        assert connection is not None
        await client.logout()
        assert connection.goaway == {"code": 0, "message": connection.goaway["message"] if connection.goaway else "",
                                     "lastRequestId": 2, "reason": "logout"}
        assert connection.closed.is_set() and client.state == "closed"
        assert (await events.next(1)).kind == "disconnected"
        with pytest.raises(ClientClosed):
            await events.next(1)
        with pytest.raises(ClientClosed):
            await pushes.next(1)
        with pytest.raises(ClientClosed) as closed:
            await client.get_user_metadata()
        assert closed.value.code == ErrorCode.unavailable
    run(main())


def test_package_version_and_exports() -> None:
    assert switchboard.__version__ == "0.1.0"
    assert "Client" in switchboard.__all__ and switchboard.PUSH_NAMES[0] == "storageEvent"
    assert json.loads(open(os.path.join(os.path.dirname(wire.__file__), "schema.json")).read())["version"] == 1


# ------------------------------------------------------------------------------------------------ statistics


def test_info_counts_the_sessions_channels_subscriptions_and_writes_made(fresh_gateway: Gateway) -> None:
    async def main() -> None:
        async with Client(fresh_gateway.tcp, "tony") as tony, Client(fresh_gateway.unix, "ana") as ana:
            await tony.subscribe_channel("room")
            await ana.subscribe_channel("room")
            await ana.subscribe_channel("hall")
            await ana.subscribe_user_metadata(user_id="tony")
            for value in ("a", "b", "c"):
                await tony.set_user_metadata(items=[{"key": "k", "value": value}])
            await tony.set_channel_metadata("room", items=[{"key": "x", "value": "1"}, {"key": "y", "value": "2"}])
            info = await tony.info()
            assert info["version"] == tony.welcome["serverName"].split("/")[1]  # type: ignore[index]
            assert info["sessions"] == 2 and info["usersOnline"] == 2 and info["connections"] == 2
            assert info["channels"] == 2 and info["memberships"] == 3
            assert info["userSubscriptions"] == 1
            assert info["metadataSets"] == 2 and info["metadataItems"] == 3
            assert info["writesTotal"] == 4 and 1 <= info["writesPerSecond"] <= 4
            assert info["nodeId"] == "" and info["nodes"] == [] and info["uptimeMs"] > 0
    run(main())


def test_info_is_for_admins_only(token_gateway: Gateway) -> None:
    async def main() -> None:
        async with Client(token_gateway.tcp, token=token_gateway.token("ana")) as ana:
            with pytest.raises(ServerError) as refused:
                await ana.info()
            assert refused.value.code == ErrorCode.permissionDenied
        async with Client(token_gateway.tcp, token=token_gateway.token("root", admin=True)) as root:
            assert (await root.info())["sessions"] == 1
    run(main())
