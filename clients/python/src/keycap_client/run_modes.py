"""Run modes (ADR 0028, docs/run-modes.md): the one option that begins calls in a replay
or shadow run instead of a live one.

Pass one as ``mode=`` to :class:`~keycap_client.KernelClient` (every call it begins) or to
one ``begin`` / ``begin_call`` / ``begin_many`` (that call)::

    kernel = KernelClient(address, ledger_address=ledger, mode=Replay("run-1"))
    handle = kernel.begin("payments.charge", args, run_id="run-1-replay")
    handle.recorded  # the call of run-1 this one matched, with its outcome

A replay call is matched to the recorded run's call at the same position (tool and key)
and gets a capability with which the ledger answers from the recorded effect and writes
nothing; a call that does not match is refused ``REPLAY_DIVERGED`` (metadata
``position``, ``expected_call_id``, ``expected_tool_id``). A shadow call's effect goes to the
ledger's shadow store, never to its entries. An Unsafe call in either is refused
``SANDBOX_UNSAFE_DENIED``.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TypeAlias

from keycap_client._gen.keycap.kernel.v1 import kernel_pb2

__all__ = ["Live", "Replay", "Shadow", "RunMode"]


@dataclass(frozen=True)
class Live:
    """A real run (the default): real effects, one per key."""


@dataclass(frozen=True)
class Replay:
    """A replay of the recorded run ``of``. Each call needs a ``run_id`` of its own (the
    replay run, where positions are counted); keys are derived in ``of``'s context, so
    they are the recorded keys."""

    of: str


@dataclass(frozen=True)
class Shadow:
    """A shadow run beside a live one; ``of`` (optional) names the live run, for listing
    the two side by side."""

    of: str = ""


#: A run mode: :class:`Live`, :class:`Replay` or :class:`Shadow`.
RunMode: TypeAlias = Live | Replay | Shadow


def apply(request: kernel_pb2.BeginCallRequest, mode: RunMode) -> kernel_pb2.BeginCallRequest:
    """``request`` with the mode's fields set (the kernel checks their rules per call)."""
    if isinstance(mode, Replay):
        request.mode = kernel_pb2.RUN_MODE_REPLAY
        request.replay_of_run_id = mode.of
    elif isinstance(mode, Shadow):
        request.mode = kernel_pb2.RUN_MODE_SHADOW
        request.shadows_run_id = mode.of
    else:
        request.mode = kernel_pb2.RUN_MODE_LIVE
    return request
