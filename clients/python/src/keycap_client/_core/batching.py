"""Client-side group commit of BeginCall and CompleteCall (ADR 0022) and of the ledger's Write
(ADR 0037), the decisions only.

While a request of one kind is in flight, the calls of that kind that arrive wait for it and
go together in the next ``BeginCalls`` / ``CompleteCalls`` / ``Writes`` (at most 256), each
answered as if it had been sent alone; with nothing in flight a call goes at once, alone, so an idle client
waits no longer than before. The sync and asyncio runtimes (:mod:`keycap_client._rpc`,
:mod:`keycap_client.aio._rpc`) do the waiting; what to send and how to read the answers is here.
"""

from __future__ import annotations

import threading
from collections.abc import Sequence
from typing import Generic, Literal, TypeVar

import grpc
from google.protobuf.message import Message

from keycap_client._gen.keycap.effect.v1 import effect_pb2
from keycap_client._core.call import Rpc
from keycap_client._gen.keycap.kernel.v1 import kernel_pb2
from keycap_client._gen.keycap.ledger.v1 import ledger_pb2
from keycap_client.errors import KeycapError

#: Most calls in one batch: the kernel proto's limit (repeated.max_items).
MAX_BATCH_CALLS = 256

#: The unary RPCs that travel in batches, with their batch RPC and the result's case.
BATCHED: dict[str, tuple[str, str]] = {
    "BeginCall": ("BeginCalls", "begun"),
    "CompleteCall": ("CompleteCalls", "completed"),
    "Write": ("Writes", "written"),
}

#: The largest payload a write may have to go in a Writes batch (ADR 0037): batches stay far
#: below the ledger's floor for one (1 MiB).
MAX_BATCHED_PAYLOAD_BYTES = 16 * 1024

#: Completion receipts held for the next BeginCalls at most (the kernel's limit per request).
MAX_RECEIPTS = 1024

W = TypeVar("W")


class Receipts:
    """The ledger's completion receipts (ADR 0035) waiting to ride on the next BeginCalls, so the
    kernel settles those calls without reading their entries back. Beyond MAX_RECEIPTS the
    oldest are dropped: a dropped receipt costs the kernel a read, never a call. Thread-safe."""

    __slots__ = ("_lock", "_held")

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._held: list[effect_pb2.CompletionReceipt] = []

    def add(self, receipt: effect_pb2.CompletionReceipt) -> None:
        with self._lock:
            self._held.append(receipt)
            if len(self._held) > MAX_RECEIPTS:
                del self._held[: len(self._held) - MAX_RECEIPTS]

    def take(self) -> list[effect_pb2.CompletionReceipt]:
        with self._lock:
            taken, self._held = self._held, []
        return taken


class BatchQueue(Generic[W]):
    """The calls of one kind waiting for the request in flight (not thread-safe: the runtime locks)."""

    __slots__ = ("_in_flight", "_waiting")

    def __init__(self) -> None:
        self._in_flight = False
        self._waiting: list[W] = []

    def arrive(self, w: W) -> bool:
        """True: nothing was in flight, so ``w`` goes now, alone (and is in flight); else it waits."""
        if not self._in_flight:
            self._in_flight = True
            return True
        self._waiting.append(w)
        return False

    def next_batch(self) -> list[W]:
        """After a request came back: what waited (at most MAX_BATCH_CALLS), to send next;
        empty when nothing waited, and then nothing is in flight."""
        batch, self._waiting = self._waiting[:MAX_BATCH_CALLS], self._waiting[MAX_BATCH_CALLS:]
        if not batch:
            self._in_flight = False
        return batch


def batchable(rpc: Rpc) -> bool:
    """Whether ``rpc`` may travel in a batch: a write only when it may be retried (never a
    single-use capability's) and its payload is small; every begin and complete."""
    if rpc.method != "Write":
        return rpc.method in BATCHED
    return rpc.retry and isinstance(rpc.request, ledger_pb2.WriteRequest) and len(rpc.request.payload) <= MAX_BATCHED_PAYLOAD_BYTES


def batch_bearer(method: str, bearers: Sequence[str | None]) -> str | None:
    """The bearer a batch is sent with: the kernel's credential the calls share, none for a
    Writes (each write names its own capability)."""
    return None if method == "Write" or not bearers else bearers[0]


def batch_request(
    method: str,
    requests: list[Message],
    receipts: Sequence[effect_pb2.CompletionReceipt] = (),
    bearers: Sequence[str | None] = (),
) -> tuple[str, Message]:
    """The batch RPC's name and request for unary requests of ``method``; a BeginCalls carries
    ``receipts``, a Writes each write's capability (``bearers[i]``, the unary call's bearer)."""
    if method == "Write":
        writes = [
            ledger_pb2.CapabilityWrite(capability=b or "", write=r)
            for r, b in zip(requests, bearers, strict=True)  # a bearer for each write, never a shorter batch
            if isinstance(r, ledger_pb2.WriteRequest)
        ]
        return "Writes", ledger_pb2.WritesRequest(writes=writes)
    if method == "BeginCall":
        calls = [r for r in requests if isinstance(r, kernel_pb2.BeginCallRequest)]
        return "BeginCalls", kernel_pb2.BeginCallsRequest(calls=calls, receipts=receipts)
    return "CompleteCalls", kernel_pb2.CompleteCallsRequest(calls=[r for r in requests if isinstance(r, kernel_pb2.CompleteCallRequest)])


def answers_of(method: str, response: Message, count: int) -> list[Message | KeycapError]:
    """Each item's answer: the unary response, or the KeycapError the unary call would have raised."""
    case = BATCHED[method][1]
    results = list(getattr(response, "results"))
    if len(results) != count:
        mismatch = KeycapError(grpc.StatusCode.INTERNAL, "BATCH_ANSWER_MISMATCH", f"the server answered {len(results)} results for {count} calls")
        return [mismatch] * count
    return [getattr(r, case) if r.WhichOneof("result") == case else KeycapError.from_status_bytes(r.error_status) for r in results]


def after_batch_refused(err: KeycapError) -> Literal["unsupported", "alone", "fail"]:
    """What a refusal of the whole batch means: a server without batch RPCs (every call alone
    from now on), something in its bytes or its size (each call alone gets its own answer), or
    the answer of every call in it."""
    if err.code == grpc.StatusCode.UNIMPLEMENTED:
        return "unsupported"
    if err.code in (grpc.StatusCode.INVALID_ARGUMENT, grpc.StatusCode.RESOURCE_EXHAUSTED):
        return "alone"
    return "fail"


def retry_alone(answer: Message | KeycapError) -> bool:
    """An item answered UNAVAILABLE (the database briefly away) is sent again alone, with the unary retry."""
    return isinstance(answer, KeycapError) and answer.code == grpc.StatusCode.UNAVAILABLE
