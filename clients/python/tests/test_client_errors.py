"""Errors that name the fix (issue 33 items 1 and 3): the runtime credential is found from a
subfolder as TypeScript finds it, a missing one says where the lookup looked, and a service
that cannot be reached is named with its address and the setting that chose it."""

from __future__ import annotations

import asyncio
import socket
import time
from pathlib import Path

import grpc
import pytest

from conftest import Stack
from keycap_client import KernelClient, KeycapError, LedgerClient, lookup_runtime_token
from keycap_client.aio import AsyncKernelClient, AsyncLedgerClient
from keycap_client.credentials import default_data_dir, missing_credential_hint

_UNSET = {"KEYCAP_RUNTIME_TOKEN": "", "KEYCAP_RUNTIME_TOKEN_FILE": "", "KEYCAP_DATA_DIR": ""}


def _nested(tmp_path: Path, token: str | None) -> Path:
    if token is not None:
        (tmp_path / ".keycap").mkdir()
        (tmp_path / ".keycap" / "runtime-token").write_text(token + "\n")
    sub = tmp_path / "app" / "src" / "deep"
    sub.mkdir(parents=True)
    return sub


def test_the_credential_is_found_from_a_nested_subfolder(tmp_path: Path) -> None:
    sub = _nested(tmp_path, "keycap_rt_above")
    found = lookup_runtime_token(_UNSET, sub)
    assert (found.token, found.source) == ("keycap_rt_above", str(tmp_path / ".keycap" / "runtime-token"))
    assert default_data_dir(_UNSET, sub) == tmp_path / ".keycap"
    # As in TypeScript: a file named .keycap is skipped, KEYCAP_DATA_DIR wins (relative to the folder).
    (sub / ".keycap").write_text("not a folder")
    assert lookup_runtime_token(_UNSET, sub).token == "keycap_rt_above"
    assert default_data_dir({"KEYCAP_DATA_DIR": "data"}, sub) == sub / "data"


def test_without_one_the_hint_lists_the_settings_and_folders_tried(tmp_path: Path) -> None:
    sub = _nested(tmp_path, None)
    if lookup_runtime_token(_UNSET, sub).token is not None:
        pytest.skip("a .keycap with a runtime-token above the temporary folder")
    hint = missing_credential_hint(_UNSET, sub)
    for want in (
        "KEYCAP_RUNTIME_TOKEN (not set)",
        "KEYCAP_RUNTIME_TOKEN_FILE (not set)",
        "KEYCAP_DATA_DIR (not set)",
        str(sub),
        str(tmp_path / "app"),
        str(tmp_path),
        "token=",
    ):
        assert want in hint
    configured = missing_credential_hint({**_UNSET, "KEYCAP_DATA_DIR": str(tmp_path / "data")}, sub)
    assert f"{tmp_path / 'data' / 'runtime-token'} (no such file)" in configured


def test_a_client_run_from_a_subfolder_presents_the_credential_above(
    stack: Stack, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    sub = _nested(tmp_path, stack.runtime_token)
    for name in _UNSET:
        monkeypatch.delenv(name, raising=False)
    monkeypatch.chdir(sub)
    with KernelClient(stack.kernel) as kernel:
        kernel.list_tools()


def test_a_kernel_call_without_a_credential_says_where_the_lookup_looked(
    stack: Stack, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    sub = _nested(tmp_path, None)
    for name in _UNSET:
        monkeypatch.delenv(name, raising=False)
    monkeypatch.chdir(sub)
    with KernelClient(stack.kernel) as kernel, pytest.raises(KeycapError) as refused:
        kernel.list_tools()
    e = refused.value
    assert (e.code, e.reason) == (grpc.StatusCode.UNAUTHENTICATED, "PRINCIPAL_CREDENTIAL_MISSING")
    assert "this client sent no runtime credential" in e.message
    assert str(sub) in e.message or "finds one now" in e.message


def _free_address() -> str:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return f"127.0.0.1:{s.getsockname()[1]}"


def _assert_unreachable(e: KeycapError, what: str, address: str, setting: str) -> None:
    assert e.code in (grpc.StatusCode.UNAVAILABLE, grpc.StatusCode.DEADLINE_EXCEEDED)
    assert e.reason == e.code.name  # the machine-readable reason is grpc's, unchanged
    assert f"the {what} at {address} could not be reached" in e.message
    assert setting in e.message
    assert "1.5 s" in e.message


def test_an_unreachable_kernel_or_ledger_is_named_with_its_address_and_setting() -> None:
    address = _free_address()
    started = time.monotonic()
    with KernelClient(address, token="keycap_rt_x", timeout=1.5) as kernel, pytest.raises(KeycapError) as k:
        kernel.list_tools()
    _assert_unreachable(k.value, "keycap kernel", address, "KEYCAP_KERNEL_ADDRESS")
    with LedgerClient(address, timeout=1.5) as ledger, pytest.raises(KeycapError) as w:
        ledger.lookup_with_capability("cap", "r")
    _assert_unreachable(w.value, "keycap ledger", address, "ledger_address")
    assert time.monotonic() - started < 60  # bounded by the timeout given, not grpc's reconnect schedule


def test_the_asyncio_clients_name_them_too() -> None:
    address = _free_address()

    async def refusals() -> tuple[KeycapError, KeycapError]:
        async with AsyncKernelClient(address, token="keycap_rt_x", timeout=1.5) as kernel:
            try:
                await kernel.list_tools()
            except KeycapError as e:
                k = e
        async with AsyncLedgerClient(address, timeout=1.5) as ledger:
            try:
                await ledger.lookup_with_capability("cap", "r")
            except KeycapError as e:
                return k, e
        raise AssertionError("expected refusals")

    k, w = asyncio.run(refusals())
    _assert_unreachable(k, "keycap kernel", address, "KEYCAP_KERNEL_ADDRESS")
    _assert_unreachable(w, "keycap ledger", address, "KEYCAP_LEDGER_ADDRESS")
