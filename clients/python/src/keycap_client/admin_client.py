"""Operator client of keycap.ledger.v1.LedgerAdminService (needs the admin credential)."""

from __future__ import annotations

from datetime import datetime
from typing import Any

import grpc

from keycap_client import _wire
from keycap_client._gen.keycap.ledger.v1 import ledger_admin_pb2, ledger_admin_pb2_grpc, ledger_pb2
from keycap_client._rpc import DEFAULT_TIMEOUT_S, LIST_PAGE_SIZE, ChannelClient, call_unary, collect_pages, open_channel
from keycap_client.credentials import TlsOptions, resolve_credentials

__all__ = ["AdminClient"]


class AdminClient(ChannelClient):
    """Reads the ledger's entries, refusals and stats.

    ``token`` is the admin credential (sent as ``authorization: Bearer <token>``);
    ``timeout`` each call's deadline in seconds (default 10).
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
        self.address = address
        self.timeout = timeout
        self.__token = token
        self._channel = open_channel(address, credentials)
        self.raw = ledger_admin_pb2_grpc.LedgerAdminServiceStub(self._channel)  # type: ignore[no-untyped-call]

    def _call(self, method: Any, request: Any, timeout: float | None) -> Any:
        return call_unary(method, request, bearer=self.__token, timeout=self.timeout if timeout is None else timeout)

    def list_entries_page(
        self, tool_id: str = "", page_token: str = "", page_size: int = 100, *, timeout: float | None = None
    ) -> ledger_admin_pb2.ListEntriesResponse:
        res: ledger_admin_pb2.ListEntriesResponse = self._call(
            self.raw.ListEntries, _wire.list_entries(tool_id, page_token, page_size), timeout
        )
        return res

    def list_entries(self, tool_id: str = "", *, timeout: float | None = None) -> list[ledger_pb2.Entry]:
        """Every entry (of one tool, or all), newest first."""
        return collect_pages(
            lambda token: self.list_entries_page(tool_id, token, LIST_PAGE_SIZE, timeout=timeout),
            lambda res: res.entries,
        )

    def get_entry(
        self, key: str | None = None, *, entry_id: str | None = None, timeout: float | None = None
    ) -> ledger_pb2.Entry:
        """One entry by idempotency key or (keyword) entry id; KeycapError NOT_FOUND when none."""
        res: ledger_admin_pb2.GetEntryResponse = self._call(self.raw.GetEntry, _wire.get_entry(key, entry_id), timeout)
        return res.entry

    def list_rejections_page(
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
        req = _wire.list_rejections(
            tool_id=tool_id,
            reason=reason,
            since=since,
            until=until,
            service=service,
            page_token=page_token,
            page_size=page_size,
        )
        res: ledger_admin_pb2.ListRejectionsResponse = self._call(self.raw.ListRejections, req, timeout)
        return res

    def list_rejections(
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
        return collect_pages(
            lambda token: self.list_rejections_page(
                tool_id=tool_id,
                reason=reason,
                since=since,
                until=until,
                service=service,
                page_token=token,
                page_size=LIST_PAGE_SIZE,
                timeout=timeout,
            ),
            lambda res: res.rejections,
        )

    def stats(self, *, timeout: float | None = None) -> ledger_admin_pb2.GetStatsResponse:
        res: ledger_admin_pb2.GetStatsResponse = self._call(self.raw.GetStats, ledger_admin_pb2.GetStatsRequest(), timeout)
        return res
