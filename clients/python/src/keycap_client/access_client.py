"""Client of keycap.kernel.v1.AccessService: principals, grants, and WhoAmI."""

from __future__ import annotations

from typing import Literal

import grpc

from keycap_client._gen.keycap.kernel.v1 import access_pb2, access_pb2_grpc
from keycap_client._core.access import AccessCore
from keycap_client._core.call import DEFAULT_TIMEOUT_S
from keycap_client._rpc import ChannelClient
from keycap_client.credentials import TlsOptions, resolve_credentials

__all__ = ["AccessClient"]


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
        self._core = AccessCore(token or None)
        self.raw = self._connect(address, resolve_credentials(tls, credentials), timeout, access_pb2_grpc.AccessServiceStub)

    def create_principal(
        self, name: str, role: Literal["runtime", "operator"], *, timeout: float | None = None
    ) -> access_pb2.CreatePrincipalResponse:
        """Creates a principal; the response's ``secret`` is shown only this once."""
        return self._run(self._core.create_principal(name, role), timeout)

    def list_principals(self, *, timeout: float | None = None) -> list[access_pb2.Principal]:
        return self._run(self._core.list_principals(), timeout)

    def revoke_principal(self, name: str, *, timeout: float | None = None) -> access_pb2.RevokePrincipalResponse:
        return self._run(self._core.revoke_principal(name), timeout)

    def add_grant(self, tool_id: str, principal: str, *, timeout: float | None = None) -> access_pb2.AddGrantResponse:
        return self._run(self._core.add_grant(tool_id, principal), timeout)

    def remove_grant(self, tool_id: str, principal: str, *, timeout: float | None = None) -> access_pb2.RemoveGrantResponse:
        return self._run(self._core.remove_grant(tool_id, principal), timeout)

    def list_grants(self, *, tool_id: str = "", principal: str = "", timeout: float | None = None) -> list[access_pb2.Grant]:
        return self._run(self._core.list_grants(tool_id, principal), timeout)

    def who_am_i(self, *, timeout: float | None = None) -> access_pb2.WhoAmIResponse:
        """The principal the kernel sees for this client, and how it was proven."""
        return self._run(self._core.who_am_i(), timeout)
