"""Run modes from Python (issue 30, ADR 0028), end to end on the real kernel and ledger:
a recorded live run replayed with the client's one ``mode`` option (the recorded outcomes,
nothing written), a replay that diverges, a shadow run, Unsafe denied in both, and the same
through the batch ``begin_many`` and the asyncio client."""

from __future__ import annotations

import asyncio
import uuid
from dataclasses import dataclass

import grpc
import pytest

from conftest import Stack
from keycap_client import (
    AdminClient,
    BeginItem,
    Idempotent,
    KernelClient,
    KeyDerivation,
    KeycapError,
    Replay,
    Shadow,
    ToolDefinition,
    Unsafe,
)
from keycap_client.aio import AsyncKernelClient


@dataclass(frozen=True)
class Recorded:
    """A recorded live run: charge A-1, transfer (Unsafe), charge A-2."""

    run_id: str
    charge: str
    transfer: str
    call_ids: list[str]
    entries: list[str]


def charge(order_id: str) -> dict[str, object]:
    return {"order_id": order_id, "amount_cents": 1200}


def transfer() -> dict[str, object]:
    return {"to": "acct-9", "amount_cents": 50}


@pytest.fixture
def recorded(kernel: KernelClient) -> Recorded:
    suffix = uuid.uuid4().hex[:10]
    charge_id, transfer_id = f"py.modes.charge.{suffix}", f"py.modes.transfer.{suffix}"
    kernel.register_tool(ToolDefinition(charge_id, Idempotent(KeyDerivation(["/order_id"], run_id=True))))
    kernel.register_tool(ToolDefinition(transfer_id, Unsafe()))
    run_id = f"rec-{suffix}"
    calls: list[str] = []
    entries: list[str] = []
    for tool, args in ((charge_id, charge("A-1")), (transfer_id, transfer()), (charge_id, charge("A-2"))):
        handle = kernel.begin(tool, args, run_id=run_id)
        res = handle.write(f"charged {args}")
        handle.complete("succeeded", f"written {res.entry.entry_id}")
        calls.append(handle.call_id)
        if tool == charge_id:
            entries.append(res.entry.entry_id)
    return Recorded(run_id, charge_id, transfer_id, calls, entries)


def entry_count(admin: AdminClient, r: Recorded) -> int:
    return len(admin.list_entries(r.charge)) + len(admin.list_entries(r.transfer))


def test_a_replay_gets_the_recorded_outcomes_writes_nothing_and_denies_unsafe(
    stack: Stack, admin: AdminClient, recorded: Recorded
) -> None:
    before = entry_count(admin, recorded)
    replay_run = f"{recorded.run_id}-replay"
    with KernelClient(stack.kernel, ledger_address=stack.ledger, mode=Replay(recorded.run_id)) as replay:
        first = replay.begin(recorded.charge, charge("A-1"), run_id=replay_run)
        assert first.recorded is not None
        assert first.recorded.call_id == recorded.call_ids[0]
        assert first.recorded.outcome_detail == f"written {recorded.entries[0]}"
        res = first.write("charged again")
        # Answered from the recorded effect: the recorded entry, nothing written.
        assert (res.duplicate, res.replayed, res.entry.entry_id) == (True, True, recorded.entries[0])

        with pytest.raises(KeycapError) as denied:
            replay.begin(recorded.transfer, transfer(), run_id=replay_run)
        assert (denied.value.code, denied.value.reason) == (grpc.StatusCode.PERMISSION_DENIED, "SANDBOX_UNSAFE_DENIED")

        last = replay.begin(recorded.charge, charge("A-2"), run_id=replay_run)
        assert last.recorded is not None and last.recorded.call_id == recorded.call_ids[2]
        assert last.write("charged again").entry.entry_id == recorded.entries[1]
    assert entry_count(admin, recorded) == before
    denials = admin.list_rejections(tool_id=recorded.transfer, reason="SANDBOX_UNSAFE_DENIED")
    assert len(denials) == 1


def test_a_changed_argument_diverges_naming_the_position_and_the_expected_call(
    kernel: KernelClient, recorded: Recorded
) -> None:
    replay = Replay(recorded.run_id)
    kernel.begin(recorded.charge, charge("A-1"), run_id=f"{recorded.run_id}-div", mode=replay)
    with pytest.raises(KeycapError) as diverged:
        # Position 1 is the recorded transfer: a charge there diverges.
        kernel.begin(recorded.charge, charge("A-9"), run_id=f"{recorded.run_id}-div", mode=replay)
    err = diverged.value
    assert (err.code, err.reason) == (grpc.StatusCode.FAILED_PRECONDITION, "REPLAY_DIVERGED")
    assert err.metadata["position"] == "1"
    assert err.metadata["expected_call_id"] == recorded.call_ids[1]
    assert err.metadata["expected_tool_id"] == recorded.transfer


def test_a_shadow_run_writes_to_the_shadow_store_only_and_denies_unsafe(
    kernel: KernelClient, admin: AdminClient, recorded: Recorded
) -> None:
    before = entry_count(admin, recorded)
    shadow_run = f"{recorded.run_id}-shadow"
    handle = kernel.begin(recorded.charge, charge("A-1"), run_id=shadow_run, mode=Shadow(recorded.run_id))
    assert handle.recorded is None
    res = handle.write("charged in shadow")
    assert (res.shadow, res.duplicate) == (True, False)
    assert res.entry.entry_id not in recorded.entries
    with pytest.raises(KeycapError) as denied:
        kernel.begin(recorded.transfer, transfer(), run_id=shadow_run, mode=Shadow())
    assert denied.value.reason == "SANDBOX_UNSAFE_DENIED"
    assert entry_count(admin, recorded) == before


def test_a_batch_begins_every_item_in_the_mode_each_answered_on_its_own(
    kernel: KernelClient, admin: AdminClient, recorded: Recorded
) -> None:
    before = entry_count(admin, recorded)
    # A batch's items are begun concurrently and take replay positions in no set order, so
    # each item here replays in a replay run of its own (position 0 of each).
    run = f"{recorded.run_id}-batch"
    answers = kernel.begin_many(
        [
            BeginItem(recorded.charge, charge("A-1"), run_id=f"{run}-1"),
            BeginItem(recorded.transfer, transfer(), run_id=f"{run}-2"),
            BeginItem(recorded.charge, charge("A-7"), run_id=f"{run}-3"),
        ],
        mode=Replay(recorded.run_id),
    )
    first, unsafe, changed = answers
    assert not isinstance(first, KeycapError) and first.recorded is not None
    assert first.recorded.call_id == recorded.call_ids[0]
    assert first.write("again").replayed
    assert isinstance(unsafe, KeycapError) and unsafe.reason == "SANDBOX_UNSAFE_DENIED"
    assert isinstance(changed, KeycapError) and changed.reason == "REPLAY_DIVERGED"
    assert (changed.metadata["position"], changed.metadata["expected_call_id"]) == ("0", recorded.call_ids[0])
    assert entry_count(admin, recorded) == before


def test_the_asyncio_client_replays_the_same_way(stack: Stack, recorded: Recorded) -> None:
    async def replay() -> tuple[str, str, bool]:
        async with AsyncKernelClient(stack.kernel, ledger_address=stack.ledger, mode=Replay(recorded.run_id)) as k:
            handle = await k.begin(recorded.charge, charge("A-1"), run_id=f"{recorded.run_id}-aio")
            assert handle.recorded is not None
            res = await handle.write("again")
            with pytest.raises(KeycapError) as diverged:
                await k.begin(recorded.charge, charge("A-1"), run_id=f"{recorded.run_id}-aio", call_id="another")
            assert diverged.value.metadata["position"] == "1"
            return handle.recorded.call_id, res.entry.entry_id, res.replayed

    assert asyncio.run(replay()) == (recorded.call_ids[0], recorded.entries[0], True)
