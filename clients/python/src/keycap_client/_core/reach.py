"""Errors told in terms of their fix: a service that could not be reached names itself, its
address and the setting that chose it; a kernel call refused for a missing credential says
where the default lookup looked. Codes and reasons stay the service's (UNAVAILABLE stays
retryable); only the message for people changes.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

import grpc

from keycap_client.credentials import missing_credential_hint
from keycap_client.errors import KeycapError
from keycap_client.reasons import PRINCIPAL_CREDENTIAL_MISSING

#: By the generated stub's name: the service as a person knows it, and where its address comes from.
_SERVICES: dict[str, tuple[str, str]] = {
    "KernelServiceStub": (
        "keycap kernel",
        "KernelClient(address) (keycap's CLI and examples read KEYCAP_KERNEL_ADDRESS, default 127.0.0.1:50051)",
    ),
    "AccessServiceStub": (
        "keycap kernel",
        "AccessClient(address) (keycap's CLI reads KEYCAP_KERNEL_ADDRESS, default 127.0.0.1:50051)",
    ),
    "LedgerServiceStub": (
        "keycap ledger",
        "KernelClient(ledger_address=...) or LedgerClient(address) "
        "(keycap's examples read KEYCAP_LEDGER_ADDRESS, default 127.0.0.1:50052)",
    ),
    "LedgerAdminServiceStub": (
        "keycap ledger admin service",
        "AdminClient(address) (keycap's CLI reads KEYCAP_ADMIN_ADDRESS, default 127.0.0.1:50053)",
    ),
}


@dataclass(frozen=True)
class Endpoint:
    """The service a client's calls go to: its stub's name, the address dialled, and a probe
    of whether the channel is connected now (None: unknown)."""

    stub: str
    address: str
    connected: Callable[[], bool | None] = field(default=lambda: None, repr=False, compare=False)


def _never_reached(error: KeycapError, endpoint: Endpoint) -> bool:
    """UNAVAILABLE, or DEADLINE_EXCEEDED while the channel is not connected, with no keycap
    reason: a service that answers sends one."""
    if error.reason != error.code.name:
        return False
    if error.code == grpc.StatusCode.UNAVAILABLE:
        return True
    return error.code == grpc.StatusCode.DEADLINE_EXCEEDED and endpoint.connected() is not True


def _cause(error: KeycapError) -> str:
    text = error.message.lower()
    if "connection refused" in text:
        return "the connection was refused"
    if "dns resolution failed" in text or "name resolution" in text:
        return "the host name does not resolve"
    if error.code == grpc.StatusCode.DEADLINE_EXCEEDED:
        return "no connection could be made"
    return "no connection could be made or kept"


def _seconds(timeout: float | None) -> str:
    return "without a deadline" if timeout is None else f"up to {timeout:g} s"


def explain(error: KeycapError, endpoint: Endpoint | None, *, timeout: float | None, bearer_sent: bool) -> KeycapError:
    """``error`` with a message that names the fix where the client knows one; else ``error``.

    ``timeout``: the call's deadline in seconds (for the message); ``bearer_sent``: whether
    the call carried ``authorization``.
    """
    if endpoint is None:
        return error
    if not bearer_sent and error.reason == PRINCIPAL_CREDENTIAL_MISSING and endpoint.stub == "KernelServiceStub":
        return error.with_message(f"{error.message}; {missing_credential_hint()}")
    named = _SERVICES.get(endpoint.stub)
    if named is None or not _never_reached(error, endpoint):
        return error
    what, setting = named
    return error.with_message(
        f"the {what} at {endpoint.address} could not be reached ({_cause(error)}; waited {_seconds(timeout)}, "
        f"the call's timeout); is keycap serve (make run) running there? The address comes from {setting}. "
        f"[grpc: {error.message}]"
    )
