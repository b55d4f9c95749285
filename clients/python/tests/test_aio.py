"""keycap end to end from Python on asyncio (issue 14): the ``keycap_client.aio`` twins
against the real kernel, ledger and MongoDB-protocol server of the session's stack.

Each test body is a coroutine run by ``asyncio.run`` (no pytest plugin): the clients are
made inside that loop, as their ``grpc.aio`` channels require. Refusals are compared with
what the sync clients see for the very same request.
"""

from __future__ import annotations

import asyncio
import inspect
import json
import subprocess
import sys
import uuid
from collections.abc import Awaitable, Callable
from datetime import datetime, timezone
from typing import Any

import grpc
import pytest

from conftest import REPO_ROOT, Stack
from keycap_client import (
    ERROR_DOMAIN,
    AccessClient,
    AdminClient,
    CapabilityHandle,
    Idempotent,
    KernelClient,
    KeyDerivation,
    KeycapError,
    LedgerClient,
    TlsOptions,
    ToolDefinition,
    Unsafe,
)
from keycap_client._gen.keycap.effect.v1 import effect_pb2
from keycap_client._gen.keycap.kernel.v1 import access_pb2, kernel_pb2
from keycap_client.aio import (
    AsyncAccessClient,
    AsyncAdminClient,
    AsyncCapabilityHandle,
    AsyncKernelClient,
    AsyncLedgerClient,
)
from test_e2e import charge_args, charge_tool, other_key

Refusal = tuple[grpc.StatusCode, str, str]


def _refusal(err: KeycapError) -> Refusal:
    return err.code, err.reason, err.domain


def sync_refusal(fn: Callable[[], object]) -> Refusal:
    with pytest.raises(KeycapError) as info:
        fn()
    return _refusal(info.value)


async def async_refusal(call: Awaitable[object]) -> Refusal:
    with pytest.raises(KeycapError) as info:
        await call
    return _refusal(info.value)


def tampered(capability: str) -> str:
    """The capability with one character of its signature changed (still canonical base64url)."""
    header, payload, signature = capability.split(".")
    i = len(signature) // 2
    swapped = "B" if signature[i] != "B" else "C"
    return ".".join((header, payload, signature[:i] + swapped + signature[i + 1 :]))


# --- the same API shape -----------------------------------------------------

_TWINS = [
    (KernelClient, AsyncKernelClient),
    (LedgerClient, AsyncLedgerClient),
    (AdminClient, AsyncAdminClient),
    (AccessClient, AsyncAccessClient),
    (CapabilityHandle, AsyncCapabilityHandle),
]
#: Methods that send nothing, plain functions in both.
_NOT_AWAITED = {"handle_for"}


def _params(fn: Any) -> list[tuple[str, Any, Any]]:
    return [(p.name, p.kind, p.default) for p in inspect.signature(fn).parameters.values()]


@pytest.mark.parametrize(("sync_cls", "async_cls"), _TWINS, ids=lambda c: c.__name__)
def test_each_async_client_has_its_sync_twins_constructor_and_methods_awaited(sync_cls: Any, async_cls: Any) -> None:
    public = {n for n in dir(sync_cls) if not n.startswith("_")}
    assert {n for n in dir(async_cls) if not n.startswith("_")} == public
    assert _params(async_cls.__init__) == _params(sync_cls.__init__)
    for name in sorted(public):
        sync_attr, async_attr = getattr(sync_cls, name), getattr(async_cls, name)
        if isinstance(sync_attr, property):
            assert isinstance(async_attr, property), name
            continue
        assert _params(async_attr) == _params(sync_attr), name
        assert inspect.iscoroutinefunction(async_attr) == (name not in _NOT_AWAITED), name
    if async_cls is not AsyncCapabilityHandle:
        assert inspect.iscoroutinefunction(async_cls.__aenter__)
        assert inspect.iscoroutinefunction(async_cls.__aexit__)


# --- register, begin, write, duplicate, complete ----------------------------


def test_register_begin_write_a_duplicate_and_complete(stack: Stack, admin: AdminClient, tool_id: str) -> None:
    async def scenario() -> None:
        # No token: the runtime credential by the default lookup (KEYCAP_RUNTIME_TOKEN).
        async with (
            AsyncKernelClient(stack.kernel, ledger_address=stack.ledger) as kernel,
            AsyncAdminClient(stack.admin, stack.admin_token) as async_admin,
        ):
            assert not (await kernel.register_tool(charge_tool(tool_id))).already_registered
            assert (await kernel.register_tool(charge_tool(tool_id))).already_registered
            assert (await kernel.get_tool(tool_id)).tool_id == tool_id
            assert tool_id in [t.tool_id for t in await kernel.list_tools()]

            first = await kernel.begin(tool_id, charge_args())
            assert isinstance(first, AsyncCapabilityHandle)
            assert first.key and first.tool_id == tool_id and first.attempt == 1
            assert first.effect_kind == effect_pb2.EFFECT_KIND_IDEMPOTENT
            assert first.expires_at is not None and first.expires_at > datetime.now(timezone.utc)
            assert "eyJ" not in repr(first)  # the capability (a JWS) never shows in a repr
            assert first.call_id in [c.call_id for c in await kernel.list_pending_calls(tool_id)]

            written = await first.write(b'{"charged":500}')
            assert not written.duplicate
            assert written.entry.key == first.key and written.entry.call_id == first.call_id

            retry = await kernel.begin(tool_id, charge_args())  # another call, the same key
            again = await retry.write(b'{"charged":500}')
            assert retry.key == first.key and retry.call_id != first.call_id
            assert again.duplicate and not again.payload_mismatch
            assert again.entry.entry_id == written.entry.entry_id

            stored = await async_admin.get_entry(first.key)
            assert stored.entry_id == written.entry.entry_id and stored.payload == b'{"charged":500}'
            assert stored.duplicate_count == 1
            assert [e.entry_id for e in await async_admin.list_entries(tool_id)] == [written.entry.entry_id]

            assert (await first.complete()).call.state == kernel_pb2.CALL_STATE_COMPLETED
            assert (await kernel.complete_call(retry.call_id, "succeeded")).call.state == kernel_pb2.CALL_STATE_COMPLETED
            assert (await kernel.complete_call(retry.call_id, "succeeded")).already_completed
            assert await kernel.list_pending_calls(tool_id) == []

    asyncio.run(scenario())
    # What the asyncio clients wrote is what the sync admin client reads.
    assert len(admin.list_entries(tool_id)) == 1


def test_concurrent_calls_on_one_client_each_write_their_own_entry(stack: Stack, tool_id: str) -> None:
    orders = [f"order-{i}" for i in range(8)]

    async def scenario() -> None:
        async with (
            AsyncKernelClient(stack.kernel, ledger_address=stack.ledger) as kernel,
            AsyncAdminClient(stack.admin, stack.admin_token) as admin,
        ):
            await kernel.register_tool(charge_tool(tool_id))
            handles = await asyncio.gather(*(kernel.begin(tool_id, charge_args(o)) for o in orders))
            results = await asyncio.gather(*(h.write(json.dumps({"order": o})) for h, o in zip(handles, orders)))
            assert not any(r.duplicate for r in results)
            assert len({h.key for h in handles}) == len(orders)
            entries = await admin.list_entries(tool_id)
            assert sorted(e.key for e in entries) == sorted(h.key for h in handles)
            await asyncio.gather(*(h.complete() for h in handles))

    asyncio.run(scenario())


# --- refusals: the same as the sync clients see -----------------------------


def test_forged_tampered_and_missing_capabilities_are_refused_as_the_sync_client_sees(
    stack: Stack, kernel: KernelClient, ledger: LedgerClient, admin: AdminClient, tool_id: str
) -> None:
    kernel.register_tool(charge_tool(tool_id))
    begun = kernel.begin_call(tool_id, json.dumps(charge_args()))
    forged_key = other_key(begun.call.key)
    bad_signature = tampered(begun.capability)

    async def scenario() -> dict[str, Refusal]:
        async with AsyncLedgerClient(stack.ledger) as async_ledger:
            return {
                "forged key": await async_refusal(
                    async_ledger.write_with_capability(begun.capability, key=forged_key, payload=b"{}")
                ),
                "tampered capability": await async_refusal(
                    async_ledger.write_with_capability(bad_signature, key=begun.call.key, payload=b"{}")
                ),
                "no capability": await async_refusal(
                    async_ledger.write_with_capability(None, key=begun.call.key, payload=b"{}")
                ),
            }

    seen = asyncio.run(scenario())

    assert seen == {
        "forged key": sync_refusal(
            lambda: ledger.write_with_capability(begun.capability, key=forged_key, payload=b"{}")
        ),
        "tampered capability": sync_refusal(
            lambda: ledger.write_with_capability(bad_signature, key=begun.call.key, payload=b"{}")
        ),
        "no capability": sync_refusal(lambda: ledger.write_with_capability(None, key=begun.call.key, payload=b"{}")),
    }
    assert seen["forged key"] == (grpc.StatusCode.PERMISSION_DENIED, "KEY_MISMATCH", ERROR_DOMAIN)
    assert seen["tampered capability"] == (grpc.StatusCode.UNAUTHENTICATED, "BAD_SIGNATURE", ERROR_DOMAIN)
    assert seen["no capability"] == (grpc.StatusCode.UNAUTHENTICATED, "CAPABILITY_MISSING", ERROR_DOMAIN)
    # Nothing was written under the call's key; the refusals were recorded against the tool.
    with pytest.raises(KeycapError) as missing:
        admin.get_entry(begun.call.key)
    assert missing.value.code == grpc.StatusCode.NOT_FOUND
    assert [r.attempted_key for r in admin.list_rejections(tool_id=tool_id, reason="KEY_MISMATCH")] == [forged_key] * 2


def test_kernel_admin_and_client_side_refusals_match_the_sync_clients(stack: Stack, tool_id: str) -> None:
    wrong = "keycap_rt_wrong-secret-0000000000"
    with KernelClient(stack.kernel, token=stack.runtime_token) as runtime:
        runtime.register_tool(charge_tool(tool_id))
    with KernelClient(stack.kernel, token=wrong) as k, AdminClient(stack.admin, "not-the-admin-token") as a:
        expected = [
            sync_refusal(lambda: k.begin_call(tool_id, '{"order_id":"o"}')),
            sync_refusal(a.stats),
            sync_refusal(lambda: a.get_entry()),
        ]
    with KernelClient(stack.kernel) as no_ledger:
        expected.append(sync_refusal(lambda: no_ledger.begin(tool_id, {"order_id": "o"}).write(b"x")))

    async def scenario() -> list[Refusal]:
        async with (
            AsyncKernelClient(stack.kernel, token=wrong) as k,
            AsyncAdminClient(stack.admin, "not-the-admin-token") as a,
            AsyncKernelClient(stack.kernel) as no_ledger,
        ):
            seen = [
                await async_refusal(k.begin_call(tool_id, '{"order_id":"o"}')),
                await async_refusal(a.stats()),
                await async_refusal(a.get_entry()),
            ]
            handle = await no_ledger.begin(tool_id, {"order_id": "o"})
            with pytest.raises(KeycapError, match="AsyncKernelClient was created without ledger_address"):
                await handle.write(b"x")
            seen.append(await async_refusal(handle.write(b"x")))
            return seen

    seen = asyncio.run(scenario())
    assert seen == expected
    assert [r[1] for r in seen] == [
        "PRINCIPAL_CREDENTIAL_INVALID",
        "ADMIN_CREDENTIAL_INVALID",
        "SELECTOR_REQUIRED",
        "LEDGER_ADDRESS_MISSING",
    ]


def test_an_unsafe_capability_writes_once_and_its_second_write_is_refused(stack: Stack) -> None:
    tool = ToolDefinition(f"py.aio.unsafe.{uuid.uuid4().hex[:12]}", Unsafe())

    async def scenario() -> None:
        async with AsyncKernelClient(stack.kernel, ledger_address=stack.ledger) as kernel:
            await kernel.register_tool(tool)
            handle = await kernel.begin(tool.id, {"amount": 5})
            assert handle.key == "" and handle.effect_kind == effect_pb2.EFFECT_KIND_UNSAFE
            assert not (await handle.write(b"moved")).duplicate
            refused = await async_refusal(handle.write(b"moved"))
            assert refused[:2] == (grpc.StatusCode.PERMISSION_DENIED, "CAPABILITY_REUSED")
            await handle.complete("failed", "not retried")

    asyncio.run(scenario())


# --- principals, grants, TLS ------------------------------------------------


def test_the_access_client_manages_principals_and_grants(stack: Stack, tool_id: str) -> None:
    name = f"py-aio-{uuid.uuid4().hex[:8]}"

    async def scenario() -> None:
        async with (
            AsyncKernelClient(stack.kernel, token=stack.runtime_token) as owner,
            AsyncAccessClient(stack.kernel, stack.admin_token) as ops,
            AsyncAccessClient(stack.kernel, stack.runtime_token) as me,
        ):
            assert (await me.who_am_i()).principal == "local-runtime"
            await owner.register_tool(charge_tool(tool_id))
            created = await ops.create_principal(name, "runtime")
            assert created.secret and created.principal.role == access_pb2.PRINCIPAL_ROLE_RUNTIME
            assert name in [p.name for p in await ops.list_principals()]
            await ops.add_grant(tool_id, name)
            assert [g.principal for g in await ops.list_grants(tool_id=tool_id)] == [name]
            await ops.remove_grant(tool_id, name)
            assert await ops.list_grants(tool_id=tool_id) == []
            await ops.revoke_principal(name)

    asyncio.run(scenario())


def test_tls_and_a_client_certificate(tls_stack: Stack) -> None:
    tls = tls_stack.tls
    assert tls is not None
    ca = TlsOptions(ca_file=tls.ca_file)
    mapped = TlsOptions(ca_file=tls.ca_file, cert_file=tls.client_cert_file, key_file=tls.client_key_file)
    tool = ToolDefinition(f"py.aio.tls.{uuid.uuid4().hex[:10]}", Idempotent(KeyDerivation(["/n"])))

    async def scenario() -> None:
        async with AsyncKernelClient(
            tls_stack.kernel, ledger_address=tls_stack.ledger, token=tls_stack.runtime_token, tls=ca
        ) as kernel:
            await kernel.register_tool(tool)
            handle = await kernel.begin(tool.id, {"n": 1})
            assert not (await handle.write(b"paid")).duplicate
            await handle.complete()
        async with AsyncAdminClient(tls_stack.admin, tls_stack.admin_token, tls=ca) as admin:
            assert (await admin.stats()).entries >= 1
        async with AsyncAccessClient(tls_stack.kernel, "", tls=mapped) as me:
            who = await me.who_am_i()
            assert (who.principal, who.auth_method) == (tls.client_principal, access_pb2.AUTH_METHOD_MTLS)

    asyncio.run(scenario())


# --- the README's example -----------------------------------------------------


def test_the_readme_asyncio_example_runs_as_written(stack: Stack, tool_id: str) -> None:
    readme = (REPO_ROOT / "clients/python/README.md").read_text(encoding="utf-8")
    example = readme.split("\n## asyncio\n", 1)[1].split("```python\n", 1)[1].split("```", 1)[0]
    for literal in ("127.0.0.1:50051", "127.0.0.1:50052", '"payments.charge"'):
        assert literal in example
    # Only the addresses of `make run` and the tool id change (a fresh tool: the first write is new).
    code = (
        example.replace("127.0.0.1:50051", stack.kernel)
        .replace("127.0.0.1:50052", stack.ledger)
        .replace('"payments.charge"', repr(tool_id))
    )
    outputs = []
    for _ in range(2):
        out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60, check=False)
        assert out.returncode == 0, out.stderr
        outputs.append(out.stdout)
    assert outputs == ["False\n", "True\n"]
