"""asyncio client of keycap.kernel.v1.AccessService (twin of :class:`keycap_client.AccessClient`)."""

from __future__ import annotations

from typing import Any, Literal

import grpc

from keycap_client import _wire
from keycap_client._gen.keycap.kernel.v1 import access_pb2, access_pb2_grpc
from keycap_client._rpc import DEFAULT_TIMEOUT_S
from keycap_client.aio._rpc import AsyncChannelClient, call_unary, collect_pages, open_channel
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
        self.address = address
        self.timeout = timeout
        self.__token = token or None
        self._channel = open_channel(address, resolve_credentials(tls, credentials))
        self.raw = access_pb2_grpc.AccessServiceStub(self._channel)  # type: ignore[no-untyped-call]

    async def _call(self, method: Any, request: Any, timeout: float | None) -> Any:
        return await call_unary(
            method, request, bearer=self.__token, timeout=self.timeout if timeout is None else timeout
        )

    async def create_principal(
        self, name: str, role: Literal["runtime", "operator"], *, timeout: float | None = None
    ) -> access_pb2.CreatePrincipalResponse:
        """Creates a principal; the response's ``secret`` is shown only this once."""
        res: access_pb2.CreatePrincipalResponse = await self._call(
            self.raw.CreatePrincipal, _wire.create_principal(name, role), timeout
        )
        return res

    async def list_principals(self, *, timeout: float | None = None) -> list[access_pb2.Principal]:
        async def page(token: str) -> access_pb2.ListPrincipalsResponse:
            res: access_pb2.ListPrincipalsResponse = await self._call(
                self.raw.ListPrincipals, _wire.list_principals(token), timeout
            )
            return res

        return await collect_pages(page, lambda res: res.principals)

    async def revoke_principal(self, name: str, *, timeout: float | None = None) -> access_pb2.RevokePrincipalResponse:
        res: access_pb2.RevokePrincipalResponse = await self._call(
            self.raw.RevokePrincipal, access_pb2.RevokePrincipalRequest(name=name), timeout
        )
        return res

    async def add_grant(self, tool_id: str, principal: str, *, timeout: float | None = None) -> access_pb2.AddGrantResponse:
        res: access_pb2.AddGrantResponse = await self._call(
            self.raw.AddGrant, access_pb2.AddGrantRequest(tool_id=tool_id, principal=principal), timeout
        )
        return res

    async def remove_grant(
        self, tool_id: str, principal: str, *, timeout: float | None = None
    ) -> access_pb2.RemoveGrantResponse:
        res: access_pb2.RemoveGrantResponse = await self._call(
            self.raw.RemoveGrant, access_pb2.RemoveGrantRequest(tool_id=tool_id, principal=principal), timeout
        )
        return res

    async def list_grants(
        self, *, tool_id: str = "", principal: str = "", timeout: float | None = None
    ) -> list[access_pb2.Grant]:
        async def page(token: str) -> access_pb2.ListGrantsResponse:
            res: access_pb2.ListGrantsResponse = await self._call(
                self.raw.ListGrants, _wire.list_grants(tool_id, principal, token), timeout
            )
            return res

        return await collect_pages(page, lambda res: res.grants)

    async def who_am_i(self, *, timeout: float | None = None) -> access_pb2.WhoAmIResponse:
        """The principal the kernel sees for this client, and how it was proven."""
        res: access_pb2.WhoAmIResponse = await self._call(self.raw.WhoAmI, access_pb2.WhoAmIRequest(), timeout)
        return res
