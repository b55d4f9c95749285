"""keycap's Python client.

Runtimes register tools and begin calls with :class:`KernelClient`; tools write
through the :class:`CapabilityHandle` it returns, which always sends the
kernel-derived key with the call's capability. :class:`LedgerClient` writes with
an explicit capability (one handed over from another process); :class:`AdminClient`
reads the ledger's entries and refusals; :class:`AccessClient` manages principals and
grants. Kernel calls carry the runtime credential (``KEYCAP_RUNTIME_TOKEN``, its file,
or ``.keycap/runtime-token``); every client takes :class:`TlsOptions`. Every error is a :class:`KeycapError`
carrying the gRPC code and the ``google.rpc.ErrorInfo`` reason. Requests are checked
against the rules in ``proto/`` before they are sent (:mod:`keycap_client.request_rules`),
and refused with the reason the kernel would give. Every reason keycap refuses with,
and its gRPC code, is in :mod:`keycap_client.reasons` (generated from ``proto/``). The same
clients on asyncio (``grpc.aio``) are in :mod:`keycap_client.aio`. Calls are begun in a live
run unless given a run mode (``mode=Replay("run-1")`` or ``mode=Shadow()``,
:mod:`keycap_client.run_modes`).
"""

from keycap_client import reasons
from keycap_client.access_client import AccessClient
from keycap_client.admin_client import AdminClient
from keycap_client.capability_handle import CapabilityHandle
from keycap_client.credentials import (
    ClientConfigError,
    RuntimeTokenLookup,
    TlsOptions,
    default_data_dir,
    lookup_runtime_token,
    runtime_token_from_env,
    tls_from_env,
)
from keycap_client.errors import CLIENT_ERROR_DOMAIN, ERROR_DOMAIN, FieldViolation, KeycapError
from keycap_client._core.kernel import BeginItem
from keycap_client.kernel_client import KernelClient
from keycap_client.ledger_client import LedgerClient
from keycap_client.run_modes import Live, Replay, RunMode, Shadow
from keycap_client.tool_definition import EffectSpec, Idempotent, KeyDerivation, Queryable, ToolDefinition, Unsafe

__all__ = [
    "AccessClient",
    "AdminClient",
    "BeginItem",
    "Live",
    "Replay",
    "RunMode",
    "Shadow",
    "ClientConfigError",
    "RuntimeTokenLookup",
    "TlsOptions",
    "default_data_dir",
    "lookup_runtime_token",
    "runtime_token_from_env",
    "tls_from_env",
    "CapabilityHandle",
    "CLIENT_ERROR_DOMAIN",
    "ERROR_DOMAIN",
    "FieldViolation",
    "EffectSpec",
    "Idempotent",
    "KernelClient",
    "KeyDerivation",
    "KeycapError",
    "LedgerClient",
    "Queryable",
    "ToolDefinition",
    "Unsafe",
    "reasons",
]
