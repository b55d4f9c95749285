"""How a client proves who it is and whom it talks to.

The runtime's bearer secret for the kernel has the same default lookup in every keycap
client (TypeScript, Python, Go): ``KEYCAP_RUNTIME_TOKEN``; else the file named by
``KEYCAP_RUNTIME_TOKEN_FILE``; else ``$KEYCAP_DATA_DIR/runtime-token`` (data dir default
``./.keycap``), which ``make run`` creates on first start. TLS: a CA that signs the
servers' certificates (pinned: the system roots are not used when it is given) and a
client certificate where a listener asks for one.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

import grpc

__all__ = [
    "ClientConfigError",
    "TlsOptions",
    "channel_credentials",
    "resolve_credentials",
    "runtime_bearer",
    "runtime_token_from_env",
    "tls_from_env",
]


class ClientConfigError(ValueError):
    """A credential or TLS setting that cannot be used; the message names it."""

    def __init__(self, setting: str, problem: str) -> None:
        super().__init__(f"{setting}: {problem}")
        self.setting = setting


@dataclass(frozen=True)
class TlsOptions:
    """TLS material for a client channel; files are read when the client is made."""

    ca_file: str | None = None
    cert_file: str | None = None
    key_file: str | None = None


def _read(setting: str, path: str) -> bytes:
    try:
        return Path(path).read_bytes()
    except OSError as err:
        raise ClientConfigError(setting, f"cannot read {path} ({err.strerror or err})") from err


def channel_credentials(tls: TlsOptions | None) -> grpc.ChannelCredentials | None:
    """Channel credentials for ``tls``; None (plaintext, for loopback) without it."""
    if tls is None:
        return None
    if (tls.cert_file is None) != (tls.key_file is None):
        raise ClientConfigError("cert_file" if tls.cert_file is None else "key_file", "a client certificate needs both cert_file and key_file")
    return grpc.ssl_channel_credentials(
        root_certificates=_read("ca_file", tls.ca_file) if tls.ca_file else None,
        private_key=_read("key_file", tls.key_file) if tls.key_file else None,
        certificate_chain=_read("cert_file", tls.cert_file) if tls.cert_file else None,
    )


def resolve_credentials(
    tls: TlsOptions | None, credentials: grpc.ChannelCredentials | None
) -> grpc.ChannelCredentials | None:
    """A client's channel credentials: ``credentials`` when given, else those of ``tls``."""
    return credentials if credentials is not None else channel_credentials(tls)


def _non_empty(env: Mapping[str, str], name: str) -> str | None:
    v = env.get(name, "").strip()
    return v or None


def runtime_token_from_env(env: Mapping[str, str] | None = None) -> str | None:
    """The runtime's bearer secret by the default lookup, or None when there is none.

    Raises ClientConfigError when ``KEYCAP_RUNTIME_TOKEN_FILE`` is set and unreadable.
    """
    e = os.environ if env is None else env
    direct = _non_empty(e, "KEYCAP_RUNTIME_TOKEN")
    if direct is not None:
        return direct
    explicit = _non_empty(e, "KEYCAP_RUNTIME_TOKEN_FILE")
    path = Path(explicit) if explicit else Path(_non_empty(e, "KEYCAP_DATA_DIR") or ".keycap").resolve() / "runtime-token"
    try:
        return path.read_text(encoding="utf-8").strip() or None
    except FileNotFoundError:
        if explicit is None:
            return None
        raise ClientConfigError("KEYCAP_RUNTIME_TOKEN_FILE", f"cannot read {path} (no such file)") from None
    except OSError as err:
        raise ClientConfigError("KEYCAP_RUNTIME_TOKEN_FILE", f"cannot read {path} ({err.strerror or err})") from err


def runtime_bearer(token: str | None) -> str | None:
    """The bearer a kernel client sends: ``token``, or by the default lookup when None.

    ``""`` (or an empty lookup) is None: no bearer, a principal proven by its client certificate.
    """
    resolved = runtime_token_from_env() if token is None else token
    return resolved or None


def tls_from_env(env: Mapping[str, str] | None = None) -> TlsOptions | None:
    """TLS options from KEYCAP_TLS_CA_FILE, KEYCAP_TLS_CLIENT_CERT_FILE, KEYCAP_TLS_CLIENT_KEY_FILE; None when unset."""
    e = os.environ if env is None else env
    ca, cert, key = (_non_empty(e, n) for n in ("KEYCAP_TLS_CA_FILE", "KEYCAP_TLS_CLIENT_CERT_FILE", "KEYCAP_TLS_CLIENT_KEY_FILE"))
    if ca is None and cert is None and key is None:
        return None
    return TlsOptions(ca_file=ca, cert_file=cert, key_file=key)
