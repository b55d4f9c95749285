"""The blocking runtime of the client core: makes the calls a flow asks for, one after another.

Everything but the waiting is :mod:`keycap_client._core` (the request's rules, metadata,
deadline, retry decision, requests, paging, results); this module calls the stub and
sleeps between tries. The asyncio twin is :mod:`keycap_client.aio._rpc`.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from types import TracebackType
from typing import Any, TypeVar

import grpc

from keycap_client._core import batching
from keycap_client._core.call import DEFAULT_TIMEOUT_S, Attempts, Flow, Rpc
from keycap_client._core.reach import Endpoint
from keycap_client.errors import KeycapError
from keycap_client.request_rules import check as check_request_rules

T = TypeVar("T")
Stub = TypeVar("Stub")


def call_unary(
    method: Callable[..., Any],
    request: Any,
    *,
    bearer: str | None,
    timeout: float | None,
    retry: bool = True,
    endpoint: Endpoint | None = None,
) -> Any:
    """Invokes ``method`` (a generated stub's multicallable) under the core's call policy
    (:class:`keycap_client._core.call.Attempts`): the request's rules checked first,
    ``authorization: Bearer <bearer>`` (when not None), one deadline ``timeout`` seconds
    from now for every try, wait-for-ready, and an UNAVAILABLE answer retried with capped,
    jittered exponential backoff (``time.sleep``) until the deadline unless ``retry`` is False.
    """
    attempts = Attempts(request, bearer=bearer, timeout=timeout, retry=retry, endpoint=endpoint)
    while True:
        try:
            return method(request, **attempts.options())
        except grpc.RpcError as err:
            time.sleep(attempts.backoff(err))


def run(flow: Flow[T], stub: Any, timeout: float | None, endpoint: Endpoint | None = None, batcher: Batcher | None = None) -> T:
    """Runs ``flow`` to its result, making each call it yields on ``stub`` (at ``endpoint``) with
    :func:`call_unary`; BeginCall and CompleteCall through ``batcher`` when there is one."""
    res: Any = None
    while True:
        try:
            rpc = flow.send(res)
        except StopIteration as done:
            result: T = done.value
            return result
        if batcher is not None and batching.batchable(rpc):
            res = batcher.call(rpc, timeout)
            continue
        method = getattr(stub, rpc.method)
        res = call_unary(method, rpc.request, bearer=rpc.bearer, timeout=timeout, retry=rpc.retry, endpoint=endpoint)


class _Waiting:
    __slots__ = ("rpc", "timeout", "done", "answer")

    def __init__(self, rpc: Rpc, timeout: float | None) -> None:
        self.rpc = rpc
        self.timeout = timeout
        self.done = threading.Event()
        self.answer: Any = None


class Batcher:
    """Sends the BeginCalls and CompleteCalls of concurrent threads together (ADR 0022,
    :mod:`keycap_client._core.batching`): a call made while one of its kind is in flight waits
    for it and goes in the next batch, answered as if alone; the batch is sent from a thread of
    its own, so the thread whose call came back returns at once."""

    def __init__(self, stub: Any, endpoint: Endpoint | None, timeout: float) -> None:
        self._stub = stub
        self._endpoint = endpoint
        self._timeout = timeout
        self._lock = threading.Lock()
        self._queues: dict[str, batching.BatchQueue[_Waiting]] = {m: batching.BatchQueue() for m in batching.BATCHED}
        self._unsupported = False
        #: Completion receipts for the next BeginCalls (ADR 0035).
        self.receipts = batching.Receipts()

    def call(self, rpc: Rpc, timeout: float | None) -> Any:
        if self._unsupported:
            return self._alone(rpc, timeout)
        check_request_rules(rpc.request)  # a request that breaks a rule is refused alone, batch or not
        w = _Waiting(rpc, timeout)
        with self._lock:
            now = self._queues[rpc.method].arrive(w)
        if now:
            try:
                return self._alone(rpc, timeout)
            finally:
                self._next(rpc.method)
        if not w.done.wait(DEFAULT_TIMEOUT_S if timeout is None else timeout):
            # It may still go out with its batch: a BeginCall carries the call id chosen here.
            raise KeycapError(grpc.StatusCode.DEADLINE_EXCEEDED, "DEADLINE_EXCEEDED", f"{rpc.method} waited past its deadline for the batch ahead of it")
        if isinstance(w.answer, BaseException):
            raise w.answer
        return w.answer

    def _alone(self, rpc: Rpc, timeout: float | None) -> Any:
        return call_unary(getattr(self._stub, rpc.method), rpc.request, bearer=rpc.bearer, timeout=timeout, retry=rpc.retry, endpoint=self._endpoint)

    def _next(self, method: str) -> None:
        with self._lock:
            batch = self._queues[method].next_batch()
        if batch:
            threading.Thread(target=self._send_then_next, args=(method, batch), daemon=True).start()

    def _send_then_next(self, method: str, batch: list[_Waiting]) -> None:
        try:
            self._send(method, batch)
        finally:
            self._next(method)

    def _send(self, method: str, batch: list[_Waiting]) -> None:
        if len(batch) == 1 or self._unsupported:
            return self._each_alone(batch)
        receipts = self.receipts.take() if method == "BeginCall" else []
        bearers = [w.rpc.bearer for w in batch]
        name, request = batching.batch_request(method, [w.rpc.request for w in batch], receipts, bearers)
        try:
            response = call_unary(getattr(self._stub, name), request, bearer=batching.batch_bearer(method, bearers), timeout=self._timeout, endpoint=self._endpoint)
        except KeycapError as err:
            then = batching.after_batch_refused(err)
            self._unsupported = self._unsupported or then == "unsupported"
            if then == "fail":
                return self._settle([(w, err) for w in batch])
            return self._each_alone(batch)
        except Exception as err:  # anything else is every call's answer, never a hang
            return self._settle([(w, err) for w in batch])
        answers = batching.answers_of(method, response, len(batch))
        self._settle([(w, a) for w, a in zip(batch, answers) if not batching.retry_alone(a)])
        self._each_alone([w for w, a in zip(batch, answers) if batching.retry_alone(a)])

    def _each_alone(self, batch: list[_Waiting]) -> None:
        threads = [threading.Thread(target=self._answer_alone, args=(w,), daemon=True) for w in batch]
        for t in threads:
            t.start()
        for t in threads:
            t.join()

    def _answer_alone(self, w: _Waiting) -> None:
        try:
            answer: Any = self._alone(w.rpc, w.timeout)
        except Exception as err:
            answer = err
        self._settle([(w, answer)])

    @staticmethod
    def _settle(answers: list[tuple[_Waiting, Any]]) -> None:
        for w, a in answers:
            w.answer = a
            w.done.set()


def open_channel(address: str, credentials: grpc.ChannelCredentials | None) -> grpc.Channel:
    """An insecure channel (loopback default) or a secure one with ``credentials``."""
    if credentials is None:
        return grpc.insecure_channel(address)
    return grpc.secure_channel(address, credentials)


_Client = TypeVar("_Client", bound="ChannelClient")


class ChannelClient:
    """Owns one gRPC channel and its stub; closes it on ``close()`` or at the end of a ``with`` block."""

    address: str
    timeout: float
    _channel: grpc.Channel
    _stub: Any
    _endpoint: Endpoint

    def _connect(
        self, address: str, credentials: grpc.ChannelCredentials | None, timeout: float, stub: Callable[[grpc.Channel], Stub]
    ) -> Stub:
        self.address = address
        self.timeout = timeout
        self._channel = open_channel(address, credentials)
        made = stub(self._channel)
        self._stub = made
        self._endpoint = Endpoint(getattr(stub, "__name__", ""), address, self._connected)
        return made

    def _connected(self) -> bool | None:
        """Whether the channel is connected now; None when grpcio does not say (its sync
        channel has no public probe that does not wait)."""
        probe = getattr(getattr(self._channel, "_channel", None), "check_connectivity_state", None)
        if not callable(probe):
            return None
        try:
            return bool(probe(False) == grpc.ChannelConnectivity.READY.value[0])
        except Exception:  # a grpcio without the probe: unknown, never a failure of its own
            return None

    _batcher: Batcher | None = None

    def _run(self, flow: Flow[T], timeout: float | None) -> T:
        """``flow``'s result; ``timeout`` None is the client's own."""
        return run(flow, self._stub, self.timeout if timeout is None else timeout, self._endpoint, self._batcher)

    def close(self) -> None:
        self._channel.close()

    def __enter__(self: _Client) -> _Client:
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.close()
