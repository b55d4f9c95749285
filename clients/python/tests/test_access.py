"""Who may mint, from Python (issue 10): runtime credentials, grants, TLS and mTLS."""

from __future__ import annotations

import time
import uuid
from pathlib import Path

import grpc
import pytest

from conftest import Stack
from keycap_client import (
    AccessClient,
    AdminClient,
    ClientConfigError,
    Idempotent,
    KernelClient,
    KeyDerivation,
    KeycapError,
    TlsOptions,
    ToolDefinition,
    runtime_token_from_env,
)
from keycap_client._gen.keycap.kernel.v1 import access_pb2


def _tool(prefix: str) -> ToolDefinition:
    return ToolDefinition(f"py.access.{prefix}.{uuid.uuid4().hex[:10]}", Idempotent(KeyDerivation(["/n"])))


def _refused(fn: object) -> KeycapError:
    assert callable(fn)
    with pytest.raises(KeycapError) as info:
        fn()
    return info.value


def test_the_default_lookup_finds_the_runtime_credential(tmp_path: Path) -> None:
    assert runtime_token_from_env({"KEYCAP_RUNTIME_TOKEN": " t0k "}) == "t0k"
    d = tmp_path
    (d / "runtime-token").write_text("from-file\n")
    assert runtime_token_from_env({"KEYCAP_DATA_DIR": str(d)}) == "from-file"
    assert runtime_token_from_env({"KEYCAP_DATA_DIR": str(d / "none")}) is None
    with pytest.raises(ClientConfigError, match="KEYCAP_RUNTIME_TOKEN_FILE"):
        runtime_token_from_env({"KEYCAP_RUNTIME_TOKEN_FILE": str(d / "missing")})


def test_without_or_with_a_wrong_credential_the_kernel_mints_nothing(stack: Stack, admin: AdminClient) -> None:
    tool = _tool("unauth")
    with KernelClient(stack.kernel, token=stack.runtime_token) as runtime:
        runtime.register_tool(tool)
    for token, reason in (("", "PRINCIPAL_CREDENTIAL_MISSING"), ("keycap_rt_wrong-secret-0000000000", "PRINCIPAL_CREDENTIAL_INVALID")):
        with KernelClient(stack.kernel, token=token) as stranger:
            e = _refused(lambda: stranger.begin_call(tool.id, '{"n":1}'))
            assert (e.code, e.reason) == (grpc.StatusCode.UNAUTHENTICATED, reason)
    recorded = admin.list_rejections(tool_id=tool.id, service="kernel")
    assert {r.reason for r in recorded} >= {"PRINCIPAL_CREDENTIAL_MISSING", "PRINCIPAL_CREDENTIAL_INVALID"}
    assert all(r.peer for r in recorded)
    with AccessClient(stack.kernel, stack.runtime_token) as me:
        assert me.who_am_i().principal == "local-runtime"


def test_grants_decide_who_may_begin_and_revocation_holds_within_seconds(stack: Stack) -> None:
    tool = _tool("grants")
    name = f"py-team-{uuid.uuid4().hex[:8]}"
    with KernelClient(stack.kernel, token=stack.runtime_token) as owner, AccessClient(stack.kernel, stack.admin_token) as ops:
        owner.register_tool(tool)
        secret = ops.create_principal(name, "runtime").secret
        with KernelClient(stack.kernel, token=secret) as other:
            e = _refused(lambda: other.begin_call(tool.id, '{"n":1}'))
            assert (e.code, e.reason) == (grpc.StatusCode.PERMISSION_DENIED, "TOOL_NOT_GRANTED")
            assert _refused(lambda: other.register_tool(tool)).reason == "TOOL_OWNED_BY_OTHER"
            ops.add_grant(tool.id, name)
            assert [g.principal for g in ops.list_grants(tool_id=tool.id)] == [name]
            deadline = time.monotonic() + 8
            while True:
                try:
                    begun = other.begin_call(tool.id, '{"n":2}')
                    break
                except KeycapError:
                    if time.monotonic() > deadline:
                        raise
                    time.sleep(0.2)
            assert begun.capability
            ops.revoke_principal(name)
            started = time.monotonic()
            while True:
                try:
                    other.begin_call(tool.id, '{"n":3}')
                except KeycapError as err:
                    assert err.reason == "PRINCIPAL_REVOKED"
                    break
                assert time.monotonic() - started < 5, "revocation did not hold within 5 s"
                time.sleep(0.2)


def _expect_no_connection(fn: object) -> None:
    e = _refused(fn)
    assert e.code in (grpc.StatusCode.UNAVAILABLE, grpc.StatusCode.DEADLINE_EXCEEDED), e


def test_tls_needs_the_ca_and_then_the_whole_call_works(tls_stack: Stack) -> None:
    tls = tls_stack.tls
    assert tls is not None
    tool = _tool("tls")
    for bad in (None, TlsOptions(ca_file=tls.other_ca_file)):
        with KernelClient(tls_stack.kernel, token=tls_stack.runtime_token, tls=bad, timeout=3) as k:
            _expect_no_connection(lambda: k.register_tool(tool))
    ok = TlsOptions(ca_file=tls.ca_file)
    with KernelClient(tls_stack.kernel, ledger_address=tls_stack.ledger, token=tls_stack.runtime_token, tls=ok) as k:
        k.register_tool(tool)
        h = k.begin(tool.id, {"n": 1})
        assert not h.write(b"paid").duplicate
        h.complete()
    with AdminClient(tls_stack.admin, tls_stack.admin_token, tls=ok) as a:
        assert a.stats().entries >= 1


def test_a_mapped_client_certificate_is_its_principal_and_an_unmapped_one_is_refused(tls_stack: Stack) -> None:
    tls = tls_stack.tls
    assert tls is not None
    mapped = TlsOptions(ca_file=tls.ca_file, cert_file=tls.client_cert_file, key_file=tls.client_key_file)
    with AccessClient(tls_stack.kernel, "", tls=mapped) as me:
        who = me.who_am_i()
        assert (who.principal, who.auth_method) == (tls.client_principal, access_pb2.AUTH_METHOD_MTLS)
    unmapped = TlsOptions(ca_file=tls.ca_file, cert_file=tls.unmapped_client_cert_file, key_file=tls.unmapped_client_key_file)
    with AccessClient(tls_stack.kernel, "", tls=unmapped) as nobody:
        e = _refused(nobody.who_am_i)
        assert (e.code, e.reason) == (grpc.StatusCode.UNAUTHENTICATED, "CERTIFICATE_NOT_MAPPED")
    with pytest.raises(ClientConfigError):
        AccessClient(tls_stack.kernel, "", tls=TlsOptions(ca_file=tls.ca_file, cert_file=tls.client_cert_file))


