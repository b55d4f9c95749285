"""gRPC server interceptors that make a service a sink (ADR 0013 §1, §8): every guarded
call is admitted under ``authorization: Bearer <capability>`` (and its ``idempotency-key``
metadata, if any) before the handler runs, or refused as the ledger refuses.

The handler reads the claims with :func:`capability_of` (``capability_of(context)``) or
:func:`~keycap_client.sink.current_capability`.
"""

from __future__ import annotations

import inspect
import weakref
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator
from typing import Any
from urllib.parse import unquote

import grpc
import grpc.aio

from keycap_client.sink import _current
from keycap_client.sink.claims import VerifiedCapability
from keycap_client.sink.grpc_status import STATUS_DETAILS_KEY, status_details
from keycap_client.sink.refusal import SinkRefusal
from keycap_client.sink.sink import AdmissionContext, Sink

__all__ = ["SinkInterceptor", "AsyncSinkInterceptor", "capability_of"]

# Sync servicer contexts take weak references; asyncio ones do not (the contextvar serves those).
_by_context: weakref.WeakKeyDictionary[Any, VerifiedCapability] = weakref.WeakKeyDictionary()


def capability_of(context: grpc.ServicerContext | grpc.aio.ServicerContext[Any, Any]) -> VerifiedCapability:
    """The verified capability of the call ``context`` belongs to; LookupError when the
    call was not admitted by a sink interceptor."""
    try:
        cap = _by_context.get(context)
    except TypeError:
        cap = None
    return cap if cap is not None else _current.current_capability()


def _metadata_value(metadata: Any, name: str) -> str | None:
    # Two or more values are joined with "," (as the gateway does), so they are refused
    # like the ledger refuses them rather than the first one passing for the call.
    values = [value for key, value in metadata or () if key == name and isinstance(value, str)]
    return ",".join(values) if values else None


def _peer(context: Any) -> str:
    # grpcio says "ipv4:127.0.0.1:5000" / "ipv6:%5B::1%5D:5000"; records carry the address.
    peer: str = context.peer() or ""
    for prefix in ("ipv4:", "ipv6:"):
        if peer.startswith(prefix):
            return unquote(peer[len(prefix) :])
    return peer


def _admission(method: str, context: Any) -> tuple[str | None, AdmissionContext]:
    md = context.invocation_metadata()
    return _metadata_value(md, "authorization"), AdmissionContext(method, _peer(context), _metadata_value(md, "idempotency-key"))


def _guard_all(method: str) -> bool:
    return True


class SinkInterceptor(grpc.ServerInterceptor):
    """For ``grpc.server(..., interceptors=[SinkInterceptor(sink)])``.

    ``guard``: which full method names (``/pkg.Service/Method``) need a capability
    (default all; exempt health checks and reflection with it).
    """

    def __init__(self, sink: Sink, *, guard: Callable[[str], bool] = _guard_all) -> None:
        self.sink = sink
        self.guard = guard

    def intercept_service(
        self,
        continuation: Callable[[grpc.HandlerCallDetails], grpc.RpcMethodHandler[Any, Any] | None],
        handler_call_details: grpc.HandlerCallDetails,
    ) -> grpc.RpcMethodHandler[Any, Any] | None:
        handler = continuation(handler_call_details)
        method: str = handler_call_details.method
        if handler is None or not self.guard(method):
            return handler
        h: Any = handler
        if h.unary_unary is not None:
            return grpc.unary_unary_rpc_method_handler(self._unary(method, h.unary_unary), h.request_deserializer, h.response_serializer)
        if h.stream_unary is not None:
            return grpc.stream_unary_rpc_method_handler(self._unary(method, h.stream_unary), h.request_deserializer, h.response_serializer)
        if h.unary_stream is not None:
            return grpc.unary_stream_rpc_method_handler(self._streaming(method, h.unary_stream), h.request_deserializer, h.response_serializer)
        return grpc.stream_stream_rpc_method_handler(self._streaming(method, h.stream_stream), h.request_deserializer, h.response_serializer)

    def _admit(self, method: str, context: Any) -> VerifiedCapability:
        authorization, admission = _admission(method, context)
        try:
            cap = self.sink.admit(authorization, admission)
        except SinkRefusal as err:
            context.set_trailing_metadata(((STATUS_DETAILS_KEY, status_details(err)),))
            context.abort(err.code, err.message)
            raise AssertionError("unreachable: context.abort raises") from err
        _by_context[context] = cap
        return cap

    def _unary(self, method: str, behavior: Callable[[Any, Any], Any]) -> Callable[[Any, Any], Any]:
        def admitted(request: Any, context: Any) -> Any:
            token = _current.current.set(self._admit(method, context))
            try:
                return behavior(request, context)
            finally:
                _current.current.reset(token)

        return admitted

    def _streaming(self, method: str, behavior: Callable[[Any, Any], Iterator[Any]]) -> Callable[[Any, Any], Iterator[Any]]:
        def admitted(request: Any, context: Any) -> Iterator[Any]:
            token = _current.current.set(self._admit(method, context))
            try:
                yield from behavior(request, context)
            finally:
                # The server's worker thread serves other calls next: none may see this capability.
                try:
                    _current.current.reset(token)
                except ValueError:  # resumed in another context than the one it was set in
                    _current.current.set(None)

        return admitted


class AsyncSinkInterceptor(grpc.aio.ServerInterceptor):
    """For ``grpc.aio.server(interceptors=[AsyncSinkInterceptor(sink)])``; ``guard`` as in
    :class:`SinkInterceptor`. Blocking work (key fetch, stores) runs in worker threads."""

    def __init__(self, sink: Sink, *, guard: Callable[[str], bool] = _guard_all) -> None:
        self.sink = sink
        self.guard = guard

    async def intercept_service(
        self,
        continuation: Callable[[grpc.HandlerCallDetails], Awaitable[grpc.RpcMethodHandler[Any, Any] | None]],
        handler_call_details: grpc.HandlerCallDetails,
    ) -> grpc.RpcMethodHandler[Any, Any] | None:
        handler = await continuation(handler_call_details)
        method: str = handler_call_details.method
        if handler is None or not self.guard(method):
            return handler
        h: Any = handler
        if h.unary_unary is not None:
            return grpc.unary_unary_rpc_method_handler(self._unary(method, h.unary_unary), h.request_deserializer, h.response_serializer)
        if h.stream_unary is not None:
            return grpc.stream_unary_rpc_method_handler(self._unary(method, h.stream_unary), h.request_deserializer, h.response_serializer)
        if h.unary_stream is not None:
            return grpc.unary_stream_rpc_method_handler(self._streaming(method, h.unary_stream), h.request_deserializer, h.response_serializer)
        return grpc.stream_stream_rpc_method_handler(self._streaming(method, h.stream_stream), h.request_deserializer, h.response_serializer)

    async def _admit(self, method: str, context: Any) -> VerifiedCapability:
        authorization, admission = _admission(method, context)
        try:
            return await self.sink.admit_async(authorization, admission)
        except SinkRefusal as err:
            await context.abort(err.code, err.message, trailing_metadata=((STATUS_DETAILS_KEY, status_details(err)),))
            raise AssertionError("unreachable: context.abort raises") from err

    def _unary(self, method: str, behavior: Callable[[Any, Any], Awaitable[Any]]) -> Callable[[Any, Any], Awaitable[Any]]:
        async def admitted(request: Any, context: Any) -> Any:
            _current.current.set(await self._admit(method, context))
            return await behavior(request, context)

        return admitted

    def _streaming(self, method: str, behavior: Callable[[Any, Any], Any]) -> Callable[[Any, Any], Any]:
        if inspect.isasyncgenfunction(behavior):

            async def admitted_gen(request: Any, context: Any) -> AsyncIterator[Any]:
                _current.current.set(await self._admit(method, context))
                async for item in behavior(request, context):
                    yield item

            return admitted_gen

        async def admitted(request: Any, context: Any) -> Any:
            _current.current.set(await self._admit(method, context))
            return await behavior(request, context)

        return admitted
