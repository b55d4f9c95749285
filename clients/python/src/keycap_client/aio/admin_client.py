"""asyncio operator client of keycap.ledger.v1.LedgerAdminService (twin of :class:`keycap_client.AdminClient`)."""

from __future__ import annotations

from datetime import datetime

import grpc

from keycap_client._gen.keycap.ledger.v1 import ledger_admin_pb2, ledger_admin_pb2_grpc, ledger_pb2
from keycap_client._core.admin import AdminCore
from keycap_client._core.call import DEFAULT_TIMEOUT_S
from keycap_client.aio._rpc import AsyncChannelClient
from keycap_client.credentials import TlsOptions, resolve_credentials

__all__ = ["AsyncAdminClient"]


class AsyncAdminClient(AsyncChannelClient):
    """Reads the ledger's entries, refusals and stats, over ``grpc.aio``.

    Same constructor and methods as :class:`keycap_client.AdminClient`, awaited;
    ``token`` is the admin credential.
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
        credentials = resolve_credentials(tls, credentials)
        self._core = AdminCore(token)
        self.raw = self._connect(address, credentials, timeout, ledger_admin_pb2_grpc.LedgerAdminServiceStub)

    async def list_entries_page(
        self, tool_id: str = "", page_token: str = "", page_size: int = 100, *, timeout: float | None = None
    ) -> ledger_admin_pb2.ListEntriesResponse:
        return await self._run(self._core.list_entries_page(tool_id, page_token, page_size), timeout)

    async def list_entries(self, tool_id: str = "", *, timeout: float | None = None) -> list[ledger_pb2.Entry]:
        """Every entry (of one tool, or all), newest first."""
        return await self._run(self._core.list_entries(tool_id), timeout)

    async def get_entry(
        self, key: str | None = None, *, entry_id: str | None = None, timeout: float | None = None
    ) -> ledger_pb2.Entry:
        """One entry by idempotency key or (keyword) entry id; KeycapError NOT_FOUND when none."""
        return await self._run(self._core.get_entry(key, entry_id), timeout)

    async def list_rejections_page(
        self,
        *,
        tool_id: str = "",
        reason: str = "",
        since: datetime | None = None,
        until: datetime | None = None,
        service: str = "",
        page_token: str = "",
        page_size: int = 100,
        timeout: float | None = None,
    ) -> ledger_admin_pb2.ListRejectionsResponse:
        flow = self._core.list_rejections_page(
            tool_id=tool_id,
            reason=reason,
            since=since,
            until=until,
            service=service,
            page_token=page_token,
            page_size=page_size,
        )
        return await self._run(flow, timeout)

    async def list_rejections(
        self,
        *,
        tool_id: str = "",
        reason: str = "",
        since: datetime | None = None,
        until: datetime | None = None,
        service: str = "",
        timeout: float | None = None,
    ) -> list[ledger_admin_pb2.Rejection]:
        """Every matching refusal, newest first; ``service`` "kernel" or "ledger" narrows to one service's."""
        flow = self._core.list_rejections(tool_id=tool_id, reason=reason, since=since, until=until, service=service)
        return await self._run(flow, timeout)

    async def stats(self, *, timeout: float | None = None) -> ledger_admin_pb2.GetStatsResponse:
        return await self._run(self._core.stats(), timeout)
