"""asyncio client of keycap.kernel.v1.AccessService (twin of :class:`keycap_client.AccessClient`)."""

from __future__ import annotations

from typing import Literal

import grpc

from keycap_client._gen.keycap.kernel.v1 import access_pb2, access_pb2_grpc
from keycap_client._core.access import AccessCore
from keycap_client._core.call import DEFAULT_TIMEOUT_S
from keycap_client.aio._rpc import AsyncChannelClient
from keycap_client.credentials import TlsOptions, resolve_credentials

__all__ = ["AsyncAccessClient"]


class AsyncAccessClient(AsyncChannelClient):
    """Principals and grants (needs an operator credential: the admin token or an
    operator principal's secret), and ``who_am_i`` (any principal), over ``grpc.aio``.

    Same constructor and methods as :class:`keycap_client.AccessClient`, awaited;
    ``token`` ``""`` sends no bearer (a principal proven by its TLS client certificate).
    """

    def __init__(
        self,
        address: str,
        token: str,
        *,
        tls: TlsOptions | None = None,
        credentials: grpc.ChannelCredentials | None = None,
        timeout: float = DEFAULT_TIMEOUT_S,
    ) -> None:
        self._core = AccessCore(token or None)
        self.raw = self._connect(address, resolve_credentials(tls, credentials), timeout, access_pb2_grpc.AccessServiceStub)

    async def create_principal(
        self, name: str, role: Literal["runtime", "operator"], *, timeout: float | None = None
    ) -> access_pb2.CreatePrincipalResponse:
        """Creates a principal; the response's ``secret`` is shown only this once."""
        return await self._run(self._core.create_principal(name, role), timeout)

    async def list_principals(self, *, timeout: float | None = None) -> list[access_pb2.Principal]:
        return await self._run(self._core.list_principals(), timeout)

    async def revoke_principal(self, name: str, *, timeout: float | None = None) -> access_pb2.RevokePrincipalResponse:
        return await self._run(self._core.revoke_principal(name), timeout)

    async def add_grant(self, tool_id: str, principal: str, *, timeout: float | None = None) -> access_pb2.AddGrantResponse:
        return await self._run(self._core.add_grant(tool_id, principal), timeout)

    async def remove_grant(self, tool_id: str, principal: str, *, timeout: float | None = None) -> access_pb2.RemoveGrantResponse:
        return await self._run(self._core.remove_grant(tool_id, principal), timeout)

    async def list_grants(self, *, tool_id: str = "", principal: str = "", timeout: float | None = None) -> list[access_pb2.Grant]:
        return await self._run(self._core.list_grants(tool_id, principal), timeout)

    async def who_am_i(self, *, timeout: float | None = None) -> access_pb2.WhoAmIResponse:
        """The principal the kernel sees for this client, and how it was proven."""
        return await self._run(self._core.who_am_i(), timeout)
