"""Client rules a real gateway never provokes, against a scripted server on a real loopback socket (it speaks
through the package's codec): the server's PING answered, a silent server declared dead, responses of another op
or of no request in flight, bytes that are no frame."""
from __future__ import annotations

import asyncio
import time
from typing import Awaitable, Callable, List

from switchboard import (Client, ClientClosed, ErrorCode, GoAwayError, ProtocolViolation, ReconnectPolicy,
                         UnexpectedResponse, wire)

Script = Callable[[asyncio.StreamReader, asyncio.StreamWriter], Awaitable[None]]
WELCOME = {"protocolVersion": 1, "userId": "tony", "sessionId": "s1", "maxInflight": 8, "heartbeatMs": 1000,
           "heartbeatMisses": 2}


async def read_message(reader: asyncio.StreamReader, decoder: wire.StreamDecoder,
                       kept: List[wire.Message]) -> wire.Message:
    while not kept:
        kept += decoder.feed(await reader.read(65536))
    return kept.pop(0)


def serve(script: Script, test: Callable[[str], Awaitable[None]]) -> None:
    async def main() -> None:
        async def handle(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
            decoder, kept = wire.StreamDecoder("c2s"), []   # type: wire.StreamDecoder, List[wire.Message]
            hello = await read_message(reader, decoder, kept)
            assert hello["op"] == "hello"
            writer.write(wire.encode({"kind": "control", "op": "welcome", "body": WELCOME}))
            await script(reader, writer)
        server = await asyncio.start_server(handle, "127.0.0.1", 0)
        port = server.sockets[0].getsockname()[1]
        try:
            await asyncio.wait_for(test("127.0.0.1:%d" % port), 30)     # a hang fails, never blocks the run
        finally:
            server.close()
    asyncio.run(main())


def test_the_servers_ping_is_answered_with_its_nonce() -> None:
    pongs: List[wire.Message] = []

    async def script(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        writer.write(wire.encode({"kind": "control", "op": "ping", "body": {"nonce": 77}}))
        decoder, kept = wire.StreamDecoder("c2s"), []   # type: wire.StreamDecoder, List[wire.Message]
        while True:
            message = await read_message(reader, decoder, kept)
            if message["op"] == "pong":
                pongs.append(message)
                return

    async def test(endpoint: str) -> None:
        client = Client(endpoint, "tony", reconnect=ReconnectPolicy.never())
        await client.connect()
        for _ in range(100):
            if pongs:
                break
            await asyncio.sleep(0.02)
        await client.close()
    serve(script, test)
    assert pongs == [{"kind": "control", "op": "pong", "body": {"nonce": 77}}]


def test_a_silent_server_is_declared_dead_after_heartbeat_times_misses() -> None:
    async def script(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        while await reader.read(65536):                   # reads the client's PINGs, never answers
            pass

    async def test(endpoint: str) -> None:
        client = Client(endpoint, "tony", reconnect=ReconnectPolicy.never())
        await client.connect()
        loop = asyncio.get_running_loop()
        started = loop.time()
        await asyncio.wait_for(client.wait_closed(), 8)
        assert 1.5 <= loop.time() - started < 5.5         # 1000 ms x 2 misses
        assert client.close_reason is not None and client.close_reason.code == ErrorCode.heartbeatTimeout
    serve(script, test)


def test_responses_of_another_op_or_of_no_request_in_flight() -> None:
    async def script(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        decoder, kept = wire.StreamDecoder("c2s"), []   # type: wire.StreamDecoder, List[wire.Message]
        request = await read_message(reader, decoder, kept)
        rid = request["requestId"]
        writer.write(wire.encode({"kind": "response", "op": "getLocks", "requestId": rid + 100, "body": {}}))
        writer.write(wire.encode({"kind": "response", "op": "getLocks", "requestId": rid, "body": {}}))
        request = await read_message(reader, decoder, kept)
        writer.write(wire.encode({"kind": "response", "op": request["op"], "requestId": request["requestId"],
                                  "body": {"userId": "tony"}}))
        await reader.read(65536)

    async def test(endpoint: str) -> None:
        async with Client(endpoint, "tony", reconnect=ReconnectPolicy.never()) as client:
            try:
                await client.get_user_metadata(timeout=3)
                raise AssertionError("a getLocks response answered getUserMetadata")
            except UnexpectedResponse as e:
                assert e.code == ErrorCode.internal
            assert (await client.get_user_metadata(timeout=3))["userId"] == "tony"
    serve(script, test)


def test_bytes_that_are_no_frame_close_the_connection_as_a_protocol_violation() -> None:
    async def script(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        writer.write(bytes([0x03, 0x04, 0x03, 0x00]))     # reserved flag bit 0x04
        await reader.read(65536)

    async def test(endpoint: str) -> None:
        client = Client(endpoint, "tony", reconnect=ReconnectPolicy.never())
        await client.connect()
        await asyncio.wait_for(client.wait_closed(), 5)
        assert isinstance(client.close_reason, ProtocolViolation)
        assert client.close_reason.code == ErrorCode.badHeader
    serve(script, test)


def test_goaway_fails_the_requests_the_server_never_read_and_answers_the_others() -> None:
    async def script(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        decoder, kept = wire.StreamDecoder("c2s"), []   # type: wire.StreamDecoder, List[wire.Message]
        first = await read_message(reader, decoder, kept)
        second = await read_message(reader, decoder, kept)
        assert second["requestId"] > first["requestId"]
        writer.write(wire.encode({"kind": "control", "op": "goAway", "body": {
            "code": 8002, "message": "restarting", "lastRequestId": first["requestId"], "reason": "serverShutdown"}}))
        await asyncio.sleep(0.3)                           # the unread request fails before the read one is answered
        writer.write(wire.encode({"kind": "response", "op": first["op"], "requestId": first["requestId"],
                                  "body": {"userId": "tony"}}))
        writer.write_eof()
        await reader.read(65536)
        writer.close()

    async def test(endpoint: str) -> None:
        client = Client(endpoint, "tony", reconnect=ReconnectPolicy.never())
        await client.connect()
        answered = asyncio.ensure_future(client.get_user_metadata(timeout=5))
        await asyncio.sleep(0.05)
        unread = asyncio.ensure_future(client.get_locks("c", timeout=5))
        done, _ = await asyncio.wait([unread], timeout=0.25)
        assert done, "the request above lastRequestId did not fail at the GOAWAY"
        error = unread.exception()
        assert isinstance(error, GoAwayError) and error.code == ErrorCode.shuttingDown
        assert error.reason == "serverShutdown"
        assert (await answered)["userId"] == "tony"
        await asyncio.wait_for(client.wait_closed(), 5)
        assert isinstance(client.close_reason, GoAwayError) and client.close_reason.code == 8002
    serve(script, test)


def test_a_request_made_after_goaway_waits_for_the_connection_to_end_without_spinning() -> None:
    async def script(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        writer.write(wire.encode({"kind": "control", "op": "goAway", "body": {
            "code": 8002, "message": "restarting", "reason": "serverShutdown"}}))
        await asyncio.sleep(1.0)                          # EOF comes a second after the GOAWAY
        writer.write_eof()
        await reader.read(65536)
        writer.close()

    async def test(endpoint: str) -> None:
        client = Client(endpoint, "tony", reconnect=ReconnectPolicy.never())
        await client.connect()
        await asyncio.sleep(0.1)
        cpu, started = time.process_time(), time.monotonic()
        try:
            await client.get_user_metadata(timeout=5)
            raise AssertionError("answered after GOAWAY")
        except ClientClosed:
            pass
        assert 0.5 < time.monotonic() - started < 4
        assert time.process_time() - cpu < 0.4            # waited, did not loop
    serve(script, test)
