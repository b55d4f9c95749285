"""The asyncio twin of :mod:`keycap_client._rpc`: the same call policy over ``grpc.aio``.

Only the waiting differs (``await`` the call, ``asyncio.sleep`` between tries); the metadata,
the deadline and the retry decision are the sync module's own functions.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Iterable
from types import TracebackType
from typing import Any, TypeVar

import grpc
import grpc.aio

from keycap_client._rpc import Item, PageT, bearer_metadata, deadline_after, retry_delay, time_left
from keycap_client.errors import KeycapError
from keycap_client.request_rules import check as check_request_rules


async def call_unary(
    method: Callable[..., Any],
    request: Any,
    *,
    bearer: str | None,
    timeout: float | None,
    retry: bool = True,
) -> Any:
    """Awaits ``method`` (a generated stub's multicallable on a ``grpc.aio`` channel).

    Exactly :func:`keycap_client._rpc.call_unary`'s policy: the request's rules checked
    before anything is sent, ``authorization: Bearer``
    metadata, one deadline ``timeout`` seconds from now for every try, wait-for-ready,
    and an UNAVAILABLE answer retried with capped, jittered exponential backoff within
    the deadline unless ``retry`` is False (a single-use capability's write). Between
    tries it sleeps with ``asyncio.sleep``: the event loop keeps running.
    """
    check_request_rules(request)
    metadata = bearer_metadata(bearer)
    deadline = deadline_after(timeout)
    attempt = 0
    while True:
        try:
            return await method(request, timeout=time_left(deadline), metadata=metadata, wait_for_ready=True)
        except grpc.RpcError as err:
            error = KeycapError.from_rpc_error(err)
            delay = retry_delay(error, attempt=attempt, deadline=deadline, retry=retry)
            if delay is None:
                raise error from err
            await asyncio.sleep(delay)
            attempt += 1


async def collect_pages(
    fetch: Callable[[str], Awaitable[PageT]], items: Callable[[PageT], Iterable[Item]]
) -> list[Item]:
    """Every item of a paged listing: ``await fetch(page_token)`` from "" until no next token."""
    out: list[Item] = []
    token = ""
    while True:
        page = await fetch(token)
        out.extend(items(page))
        token = page.next_page_token
        if not token:
            return out


def open_channel(address: str, credentials: grpc.ChannelCredentials | None) -> grpc.aio.Channel:
    """An insecure ``grpc.aio`` channel (loopback default) or a secure one with ``credentials``.

    The channel belongs to the running event loop: make clients inside it.
    """
    if credentials is None:
        return grpc.aio.insecure_channel(address)
    return grpc.aio.secure_channel(address, credentials)


_Client = TypeVar("_Client", bound="AsyncChannelClient")


class AsyncChannelClient:
    """Owns one ``grpc.aio`` channel; closes it on ``await close()`` or at the end of an ``async with`` block."""

    _channel: grpc.aio.Channel

    async def close(self) -> None:
        await self._channel.close()

    async def __aenter__(self: _Client) -> _Client:
        return self

    async def __aexit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        await self.close()
