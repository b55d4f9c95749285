"""keycap.ledger.v1.LedgerAdminService's operations as flows (the sync and asyncio admin clients run them)."""

from __future__ import annotations

from datetime import datetime

from keycap_client._core import wire
from keycap_client._core.call import LIST_PAGE_SIZE, ClientCore, Flow, collect_pages
from keycap_client._gen.keycap.ledger.v1 import ledger_admin_pb2, ledger_pb2


class AdminCore(ClientCore):
    """Every LedgerAdminService operation, with the admin credential as the bearer."""

    __slots__ = ()

    def list_entries_page(self, tool_id: str, page_token: str, page_size: int) -> Flow[ledger_admin_pb2.ListEntriesResponse]:
        req = wire.list_entries(tool_id, page_token, page_size)
        res: ledger_admin_pb2.ListEntriesResponse = yield from self._unary("ListEntries", req)
        return res

    def list_entries(self, tool_id: str) -> Flow[list[ledger_pb2.Entry]]:
        return (
            yield from collect_pages(
                lambda token: self.list_entries_page(tool_id, token, LIST_PAGE_SIZE), lambda res: res.entries
            )
        )

    def get_entry(self, key: str | None, entry_id: str | None) -> Flow[ledger_pb2.Entry]:
        res: ledger_admin_pb2.GetEntryResponse = yield from self._unary("GetEntry", wire.get_entry(key, entry_id))
        return res.entry

    def list_rejections_page(
        self,
        *,
        tool_id: str,
        reason: str,
        since: datetime | None,
        until: datetime | None,
        service: str,
        page_token: str,
        page_size: int,
    ) -> Flow[ledger_admin_pb2.ListRejectionsResponse]:
        req = wire.list_rejections(
            tool_id=tool_id,
            reason=reason,
            since=since,
            until=until,
            service=service,
            page_token=page_token,
            page_size=page_size,
        )
        res: ledger_admin_pb2.ListRejectionsResponse = yield from self._unary("ListRejections", req)
        return res

    def list_rejections(
        self, *, tool_id: str, reason: str, since: datetime | None, until: datetime | None, service: str
    ) -> Flow[list[ledger_admin_pb2.Rejection]]:
        def page(token: str) -> Flow[ledger_admin_pb2.ListRejectionsResponse]:
            return self.list_rejections_page(
                tool_id=tool_id,
                reason=reason,
                since=since,
                until=until,
                service=service,
                page_token=token,
                page_size=LIST_PAGE_SIZE,
            )

        return (yield from collect_pages(page, lambda res: res.rejections))

    def stats(self) -> Flow[ledger_admin_pb2.GetStatsResponse]:
        res: ledger_admin_pb2.GetStatsResponse = yield from self._unary("GetStats", ledger_admin_pb2.GetStatsRequest())
        return res
