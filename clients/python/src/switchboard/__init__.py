"""Switchboard client for Python: asyncio, typed, standard library only.

    async with Client("127.0.0.1:7400", "tony") as client:
        await client.set_user_metadata(items=[{"key": "status", "value": "away"}])

See Docs/python-client.md. The wire codec (the protocol's reference implementation) is `switchboard.wire`.
"""
from ._generated import *  # noqa: F401,F403  (the schema's types, ErrorCode, Operations)
from ._generated import ErrorCode, Operations, PUSH_NAMES, Welcome
from .client import Client, ConnectionEvent, MetadataSetCopy, ReconnectPolicy, Stream, TokenProvider, __version__
from .connection import Connection, Endpoint, Push, Stats
from .errors import (ClientClosed, ConnectFailed, ConnectionLost, GoAwayError, NotConnected, ProtocolViolation,
                     RequestTimeout, ServerError, SwitchboardError, TLSFailed, UnexpectedResponse)

__all__ = [
    "Client", "ConnectionEvent", "MetadataSetCopy", "ReconnectPolicy", "Stream", "TokenProvider", "Connection", "Endpoint", "Push",
    "Stats", "ErrorCode", "Operations", "PUSH_NAMES", "Welcome", "SwitchboardError", "ServerError", "GoAwayError",
    "RequestTimeout", "ConnectionLost", "NotConnected", "ConnectFailed", "TLSFailed", "UnexpectedResponse",
    "ProtocolViolation", "ClientClosed", "__version__",
]
