"""Low-level asyncio client of keycap.ledger.v1.LedgerService (twin of :class:`keycap_client.LedgerClient`)."""

from __future__ import annotations

import grpc

from keycap_client import _wire
from keycap_client._gen.keycap.ledger.v1 import ledger_pb2, ledger_pb2_grpc
from keycap_client._rpc import DEFAULT_TIMEOUT_S
from keycap_client.aio._rpc import AsyncChannelClient, call_unary, open_channel
from keycap_client.credentials import TlsOptions, resolve_credentials

__all__ = ["AsyncLedgerClient"]


class AsyncLedgerClient(AsyncChannelClient):
    """Writes to the ledger with an explicit capability, over ``grpc.aio``.

    Same constructor and methods as :class:`keycap_client.LedgerClient`, awaited.
    """

    def __init__(
        self,
        address: str,
        *,
        tls: TlsOptions | None = None,
        credentials: grpc.ChannelCredentials | None = None,
        timeout: float = DEFAULT_TIMEOUT_S,
    ) -> None:
        credentials = resolve_credentials(tls, credentials)
        self.address = address
        self.timeout = timeout
        self._channel = open_channel(address, credentials)
        self.raw = ledger_pb2_grpc.LedgerServiceStub(self._channel)  # type: ignore[no-untyped-call]

    async def write_with_capability(
        self,
        capability: str | None,
        *,
        key: str = "",
        request_id: str = "",
        payload: bytes | str = b"",
        timeout: float | None = None,
        retry: bool = True,
    ) -> ledger_pb2.WriteResponse:
        """Write with ``capability`` (None: send no capability at all); ``retry`` as in call_unary."""
        res: ledger_pb2.WriteResponse = await call_unary(
            self.raw.Write,
            _wire.write(key, request_id, payload),
            bearer=capability,
            timeout=self.timeout if timeout is None else timeout,
            retry=retry,
        )
        return res

    async def lookup_with_capability(
        self, capability: str | None, request_id: str, *, timeout: float | None = None
    ) -> ledger_pb2.LookupRequestResponse:
        """Whether the effect of ``request_id`` took effect (needs a Queryable capability for it)."""
        res: ledger_pb2.LookupRequestResponse = await call_unary(
            self.raw.LookupRequest,
            ledger_pb2.LookupRequestRequest(request_id=request_id),
            bearer=capability,
            timeout=self.timeout if timeout is None else timeout,
        )
        return res
