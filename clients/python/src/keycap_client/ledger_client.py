"""Low-level client of keycap.ledger.v1.LedgerService."""

from __future__ import annotations

import grpc

from keycap_client._gen.keycap.ledger.v1 import ledger_pb2, ledger_pb2_grpc
from keycap_client._core import ledger
from keycap_client._core.call import DEFAULT_TIMEOUT_S
from keycap_client._rpc import Batcher, ChannelClient
from keycap_client.credentials import TlsOptions, resolve_credentials

__all__ = ["LedgerClient"]


class LedgerClient(ChannelClient):
    """Writes to the ledger with an explicit capability.

    Tools normally write through a :class:`~keycap_client.CapabilityHandle`;
    this is for runtimes of other shapes (a capability handed over from another
    process or language) and for tests that must misbehave on purpose.
    ``timeout`` is each call's deadline in seconds (default 10). ``batching``: writes that
    threads make while one is in flight go together in the next ``Writes``, each answered as
    if alone (ADR 0037; single-use capabilities' writes and payloads above 16 KiB always go
    alone). Default False here; a KernelClient's handles write through a client with it on
    unless the KernelClient's ``batching`` is False.
    """

    def __init__(
        self,
        address: str,
        *,
        tls: TlsOptions | None = None,
        credentials: grpc.ChannelCredentials | None = None,
        timeout: float = DEFAULT_TIMEOUT_S,
        batching: bool = False,
    ) -> None:
        credentials = resolve_credentials(tls, credentials)
        self.raw = self._connect(address, credentials, timeout, ledger_pb2_grpc.LedgerServiceStub)
        if batching:
            # Writes made while one is in flight go together in one Writes (ADR 0037).
            self._batcher = Batcher(self.raw, self._endpoint, timeout)

    def write_with_capability(
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
        flow = ledger.write_with_capability(capability, key=key, request_id=request_id, payload=payload, retry=retry)
        return self._run(flow, timeout)

    def lookup_with_capability(
        self, capability: str | None, request_id: str, *, timeout: float | None = None
    ) -> ledger_pb2.LookupRequestResponse:
        """Whether the effect of ``request_id`` took effect (needs a Queryable capability for it)."""
        return self._run(ledger.lookup_with_capability(capability, request_id), timeout)
