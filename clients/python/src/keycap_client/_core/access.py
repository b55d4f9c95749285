"""keycap.kernel.v1.AccessService's operations as flows (the sync and asyncio access clients run them)."""

from __future__ import annotations

from typing import Literal

from keycap_client._core import wire
from keycap_client._core.call import ClientCore, Flow, collect_pages
from keycap_client._gen.keycap.kernel.v1 import access_pb2


class AccessCore(ClientCore):
    """Every AccessService operation: principals, grants, WhoAmI."""

    __slots__ = ()

    def create_principal(
        self, name: str, role: Literal["runtime", "operator"]
    ) -> Flow[access_pb2.CreatePrincipalResponse]:
        req = wire.create_principal(name, role)
        res: access_pb2.CreatePrincipalResponse = yield from self._unary("CreatePrincipal", req)
        return res

    def _principals_page(self, token: str) -> Flow[access_pb2.ListPrincipalsResponse]:
        res: access_pb2.ListPrincipalsResponse = yield from self._unary("ListPrincipals", wire.list_principals(token))
        return res

    def list_principals(self) -> Flow[list[access_pb2.Principal]]:
        return (yield from collect_pages(self._principals_page, lambda res: res.principals))

    def revoke_principal(self, name: str) -> Flow[access_pb2.RevokePrincipalResponse]:
        req = access_pb2.RevokePrincipalRequest(name=name)
        res: access_pb2.RevokePrincipalResponse = yield from self._unary("RevokePrincipal", req)
        return res

    def add_grant(self, tool_id: str, principal: str) -> Flow[access_pb2.AddGrantResponse]:
        req = access_pb2.AddGrantRequest(tool_id=tool_id, principal=principal)
        res: access_pb2.AddGrantResponse = yield from self._unary("AddGrant", req)
        return res

    def remove_grant(self, tool_id: str, principal: str) -> Flow[access_pb2.RemoveGrantResponse]:
        req = access_pb2.RemoveGrantRequest(tool_id=tool_id, principal=principal)
        res: access_pb2.RemoveGrantResponse = yield from self._unary("RemoveGrant", req)
        return res

    def list_grants(self, tool_id: str, principal: str) -> Flow[list[access_pb2.Grant]]:
        def page(token: str) -> Flow[access_pb2.ListGrantsResponse]:
            req = wire.list_grants(tool_id, principal, token)
            res: access_pb2.ListGrantsResponse = yield from self._unary("ListGrants", req)
            return res

        return (yield from collect_pages(page, lambda res: res.grants))

    def who_am_i(self) -> Flow[access_pb2.WhoAmIResponse]:
        res: access_pb2.WhoAmIResponse = yield from self._unary("WhoAmI", access_pb2.WhoAmIRequest())
        return res
