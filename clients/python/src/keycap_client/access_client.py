"""Client of keycap.kernel.v1.AccessService: principals, grants, and WhoAmI."""

from __future__ import annotations

from typing import Any, Literal

import grpc

from keycap_client._gen.keycap.kernel.v1 import access_pb2, access_pb2_grpc
from keycap_client._rpc import DEFAULT_TIMEOUT_S, ChannelClient, call_unary, open_channel
from keycap_client.credentials import TlsOptions, channel_credentials

__all__ = ["AccessClient"]

_ROLES = {"runtime": access_pb2.PRINCIPAL_ROLE_RUNTIME, "operator": access_pb2.PRINCIPAL_ROLE_OPERATOR}


class AccessClient(ChannelClient):
    """Principals and grants (needs an operator credential: the admin token or an
    operator principal's secret), and ``who_am_i`` (any principal).

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
        self._channel = open_channel(address, credentials if credentials is not None else channel_credentials(tls))
        self.raw = access_pb2_grpc.AccessServiceStub(self._channel)  # type: ignore[no-untyped-call]

    def _call(self, method: Any, request: Any, timeout: float | None) -> Any:
        return call_unary(method, request, bearer=self.__token, timeout=self.timeout if timeout is None else timeout)

    def create_principal(
        self, name: str, role: Literal["runtime", "operator"], *, timeout: float | None = None
    ) -> access_pb2.CreatePrincipalResponse:
        """Creates a principal; the response's ``secret`` is shown only this once."""
        res: access_pb2.CreatePrincipalResponse = self._call(
            self.raw.CreatePrincipal, access_pb2.CreatePrincipalRequest(name=name, role=_ROLES[role]), timeout
        )
        return res

    def list_principals(self, *, timeout: float | None = None) -> list[access_pb2.Principal]:
        out: list[access_pb2.Principal] = []
        token = ""
        while True:
            res: access_pb2.ListPrincipalsResponse = self._call(
                self.raw.ListPrincipals, access_pb2.ListPrincipalsRequest(page_size=1000, page_token=token), timeout
            )
            out.extend(res.principals)
            token = res.next_page_token
            if not token:
                return out

    def revoke_principal(self, name: str, *, timeout: float | None = None) -> access_pb2.RevokePrincipalResponse:
        res: access_pb2.RevokePrincipalResponse = self._call(
            self.raw.RevokePrincipal, access_pb2.RevokePrincipalRequest(name=name), timeout
        )
        return res

    def add_grant(self, tool_id: str, principal: str, *, timeout: float | None = None) -> access_pb2.AddGrantResponse:
        res: access_pb2.AddGrantResponse = self._call(
            self.raw.AddGrant, access_pb2.AddGrantRequest(tool_id=tool_id, principal=principal), timeout
        )
        return res

    def remove_grant(self, tool_id: str, principal: str, *, timeout: float | None = None) -> access_pb2.RemoveGrantResponse:
        res: access_pb2.RemoveGrantResponse = self._call(
            self.raw.RemoveGrant, access_pb2.RemoveGrantRequest(tool_id=tool_id, principal=principal), timeout
        )
        return res

    def list_grants(self, *, tool_id: str = "", principal: str = "", timeout: float | None = None) -> list[access_pb2.Grant]:
        out: list[access_pb2.Grant] = []
        token = ""
        while True:
            res: access_pb2.ListGrantsResponse = self._call(
                self.raw.ListGrants,
                access_pb2.ListGrantsRequest(tool_id=tool_id, principal=principal, page_size=1000, page_token=token),
                timeout,
            )
            out.extend(res.grants)
            token = res.next_page_token
            if not token:
                return out

    def who_am_i(self, *, timeout: float | None = None) -> access_pb2.WhoAmIResponse:
        """The principal the kernel sees for this client, and how it was proven."""
        res: access_pb2.WhoAmIResponse = self._call(self.raw.WhoAmI, access_pb2.WhoAmIRequest(), timeout)
        return res
