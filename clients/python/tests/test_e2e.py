"""keycap end to end from Python: real kernel, ledger and MongoDB-protocol server.

Each test registers its own Idempotent tool (a fresh id per run) and checks one
guarantee from the outside, through the public client only.
"""

from __future__ import annotations

import base64
import hashlib
import json
import subprocess
from datetime import datetime, timedelta, timezone

import grpc
import pytest

from conftest import REPO_ROOT, Stack, send_unchecked
from keycap_client import (
    ERROR_DOMAIN,
    AdminClient,
    CapabilityHandle,
    Idempotent,
    KernelClient,
    KeyDerivation,
    KeycapError,
    LedgerClient,
    ToolDefinition,
)
from keycap_client._gen.keycap.effect.v1 import effect_pb2
from keycap_client._gen.keycap.kernel.v1 import kernel_pb2

TS_RUNTIME = REPO_ROOT / "clients/python/tests/ts_runtime_begin.cjs"


def charge_tool(tool_id: str) -> ToolDefinition:
    return ToolDefinition(tool_id, Idempotent(KeyDerivation(["/order_id"])))


def charge_args(order_id: str = "order-1") -> dict[str, object]:
    # requested_at is not named by the derivation, so it never changes the key.
    return {"order_id": order_id, "amount_cents": 500, "requested_at": datetime.now(timezone.utc).isoformat()}


def other_key(key: str) -> str:
    """A well-formed key the kernel did not derive for this call."""
    return base64.urlsafe_b64encode(hashlib.sha256(b"not-the-kernel's:" + key.encode()).digest()).rstrip(b"=").decode()


# --- kernel -----------------------------------------------------------------


def test_kernel_refuses_an_idempotent_tool_without_a_key_derivation(stack: Stack, kernel: KernelClient, tool_id: str) -> None:
    tool = kernel_pb2.Tool(tool_id=tool_id, effect_class=effect_pb2.EffectClass(idempotent=effect_pb2.Idempotent()))
    # The client refuses it before sending (tests/test_request_rules.py); sent past that
    # check, the kernel refuses it the same way.
    err = send_unchecked(stack, kernel_pb2.RegisterToolRequest(tool=tool))
    assert err.code == grpc.StatusCode.INVALID_ARGUMENT
    assert err.reason == "KEY_DERIVATION_REQUIRED"
    assert err.domain == ERROR_DOMAIN
    assert err.metadata["field"] == "tool.effect_class.idempotent.key"
    with pytest.raises(KeycapError) as caught:
        kernel.register_tool(tool)
    assert (caught.value.reason, caught.value.metadata["field"]) == (err.reason, err.metadata["field"])


def test_begin_derives_one_key_from_the_named_fields_only(kernel: KernelClient, tool_id: str) -> None:
    assert not kernel.register_tool(charge_tool(tool_id)).already_registered
    assert kernel.register_tool(charge_tool(tool_id)).already_registered

    first = kernel.begin(tool_id, charge_args())
    again = kernel.begin(tool_id, charge_args())  # another call, another requested_at
    other = kernel.begin(tool_id, charge_args("order-2"))

    assert isinstance(first, CapabilityHandle)
    assert first.key and first.key == again.key != other.key
    assert first.call_id != again.call_id
    assert first.tool_id == tool_id and first.attempt == 1
    assert first.effect_kind == effect_pb2.EFFECT_KIND_IDEMPOTENT
    assert first.expires_at is not None and first.expires_at > datetime.now(timezone.utc)
    assert "eyJ" not in repr(first)  # the capability (a JWS) never shows in a repr


# --- ledger -----------------------------------------------------------------


def test_a_write_through_the_handle_records_exactly_one_entry(
    kernel: KernelClient, admin: AdminClient, tool_id: str
) -> None:
    kernel.register_tool(charge_tool(tool_id))
    handle = kernel.begin(tool_id, charge_args())

    res = handle.write(b'{"charged":500}')

    assert not res.duplicate
    assert res.entry.key == handle.key
    assert res.entry.tool_id == tool_id and res.entry.call_id == handle.call_id
    stored = admin.get_entry(handle.key)
    assert stored.entry_id == res.entry.entry_id
    assert stored.payload == b'{"charged":500}'
    assert [e.entry_id for e in admin.list_entries(tool_id)] == [res.entry.entry_id]
    assert handle.complete().call.state == kernel_pb2.CALL_STATE_COMPLETED


def test_the_same_call_again_gets_the_same_key_and_writes_nothing_new(
    kernel: KernelClient, admin: AdminClient, tool_id: str
) -> None:
    kernel.register_tool(charge_tool(tool_id))
    first = kernel.begin(tool_id, charge_args())
    original = first.write(b'{"charged":500}')

    retry = kernel.begin(tool_id, charge_args())
    again = retry.write(b'{"charged":500}')

    assert retry.key == first.key
    assert again.duplicate
    assert again.entry.entry_id == original.entry.entry_id
    assert not again.payload_mismatch
    assert len(admin.list_entries(tool_id)) == 1
    assert admin.get_entry(first.key).duplicate_count == 1


def test_refuses_a_write_under_a_key_the_kernel_did_not_derive_and_records_it_against_the_tool(
    kernel: KernelClient, ledger: LedgerClient, admin: AdminClient, tool_id: str
) -> None:
    kernel.register_tool(charge_tool(tool_id))
    begun = kernel.begin_call(tool_id, json.dumps(charge_args()))
    forged = other_key(begun.call.key)
    before = datetime.now(timezone.utc) - timedelta(seconds=5)

    with pytest.raises(KeycapError) as caught:
        ledger.write_with_capability(begun.capability, key=forged, payload=b'{"charged":500}')

    err = caught.value
    assert err.code == grpc.StatusCode.PERMISSION_DENIED
    assert err.reason == "KEY_MISMATCH"
    assert err.domain == ERROR_DOMAIN
    # Nothing was written under either key.
    for key in (forged, begun.call.key):
        with pytest.raises(KeycapError) as missing:
            admin.get_entry(key)
        assert missing.value.code == grpc.StatusCode.NOT_FOUND
    # The refusal is recorded against the tool, from the verified capability.
    rejections = admin.list_rejections(tool_id=tool_id, since=before)
    assert len(rejections) == 1
    r = rejections[0]
    assert r.reason == "KEY_MISMATCH" and r.code == "PERMISSION_DENIED"
    assert r.tool_id == tool_id and r.tool_id_verified
    assert r.attempted_key == forged
    assert r.capability_key == begun.call.key
    assert r.call_id == begun.call.call_id
    assert admin.list_rejections(tool_id=tool_id, reason="KEY_MISMATCH")[0].rejection_id == r.rejection_id


def test_refuses_a_write_without_a_capability(kernel: KernelClient, ledger: LedgerClient, tool_id: str) -> None:
    kernel.register_tool(charge_tool(tool_id))
    key = kernel.begin(tool_id, charge_args()).key

    with pytest.raises(KeycapError) as caught:
        ledger.write_with_capability(None, key=key, payload=b"{}")

    assert caught.value.code == grpc.StatusCode.UNAUTHENTICATED
    assert caught.value.reason == "CAPABILITY_MISSING"


def test_the_admin_service_refuses_a_caller_without_the_admin_credential(stack: Stack) -> None:
    with AdminClient(stack.admin, "not-the-admin-token") as intruder:
        with pytest.raises(KeycapError) as caught:
            intruder.stats()
    assert caught.value.code == grpc.StatusCode.UNAUTHENTICATED
    assert caught.value.reason == "ADMIN_CREDENTIAL_INVALID"


# --- across languages -------------------------------------------------------


def test_a_typescript_runtime_begins_the_call_and_a_python_tool_writes_with_its_capability(
    stack: Stack, ledger: LedgerClient, admin: AdminClient, tool_id: str
) -> None:
    args = json.dumps(charge_args("order-ts"))
    out = subprocess.run(
        ["node", str(TS_RUNTIME), stack.kernel, tool_id, args],
        cwd=REPO_ROOT,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert out.returncode == 0, out.stderr
    begun = json.loads(out.stdout)

    res = ledger.write_with_capability(begun["capability"], key=begun["key"], payload=b'{"charged":500}')

    assert not res.duplicate
    entry = admin.get_entry(begun["key"])
    assert entry.entry_id == res.entry.entry_id
    assert entry.tool_id == tool_id and entry.call_id == begun["call_id"]

    # The same TS-minted capability under another key is refused like any other.
    with pytest.raises(KeycapError) as caught:
        ledger.write_with_capability(begun["capability"], key=other_key(begun["key"]), payload=b"{}")
    assert caught.value.reason == "KEY_MISMATCH"
