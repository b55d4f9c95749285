"""How a client proves who it is and whom it talks to.

The runtime's bearer secret for the kernel has the same default lookup in every keycap
client (TypeScript, Python, Go): ``KEYCAP_RUNTIME_TOKEN``; else the file named by
``KEYCAP_RUNTIME_TOKEN_FILE``; else ``$KEYCAP_DATA_DIR/runtime-token`` (data dir default:
the nearest ``.keycap`` folder in the working directory or above it, up to the filesystem's
root, a file named ``.keycap`` skipped; else ``./.keycap``), which ``make run`` creates on
first start. An empty secret is none. A refusal for a missing credential says where the
lookup looked (:func:`missing_credential_hint`). TLS: a CA that signs the
servers' certificates (pinned: the system roots are not used when it is given) and a
client certificate where a listener asks for one.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path

import grpc

__all__ = [
    "ClientConfigError",
    "RuntimeTokenLookup",
    "TlsOptions",
    "channel_credentials",
    "default_data_dir",
    "lookup_runtime_token",
    "missing_credential_hint",
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


def default_data_dir(env: Mapping[str, str] | None = None, cwd: str | Path | None = None) -> Path:
    """The data directory, as the services resolve it: ``KEYCAP_DATA_DIR`` (relative to
    ``cwd``), else the nearest ``.keycap`` folder in ``cwd`` or above it (so a client run from
    a subfolder finds the credentials ``make run`` made at the top), else ``cwd/.keycap``.
    ``cwd`` defaults to the working directory."""
    e = os.environ if env is None else env
    here = Path(os.path.abspath(cwd if cwd is not None else os.getcwd()))
    configured = _non_empty(e, "KEYCAP_DATA_DIR")
    if configured is not None:
        return Path(os.path.abspath(here / configured))
    found, _ = _search_data_dir(here)
    return found if found is not None else here / ".keycap"


def _search_data_dir(here: Path) -> tuple[Path | None, list[Path]]:
    """The nearest ``.keycap`` folder in ``here`` or above, and every folder searched."""
    searched: list[Path] = []
    for folder in (here, *here.parents):
        searched.append(folder)
        if os.path.isdir(folder / ".keycap"):
            return folder / ".keycap", searched
    return None, searched


@dataclass(frozen=True)
class RuntimeTokenLookup:
    """What the default lookup found: the secret and where it was read, or nothing and
    every place it looked, in order (for an error that says where to put one)."""

    #: The secret, trimmed; None when the lookup found none (an empty file is none).
    token: str | None
    #: ``"KEYCAP_RUNTIME_TOKEN"`` or the file read; None when none was found.
    source: str | None
    #: Each place looked at, for people, e.g. ``"KEYCAP_RUNTIME_TOKEN (not set)"``.
    tried: tuple[str, ...] = field(default=())


def _data_dir_trail(e: Mapping[str, str], here: Path) -> list[str]:
    configured = _non_empty(e, "KEYCAP_DATA_DIR")
    if configured is not None:
        return [f"KEYCAP_DATA_DIR={configured}"]
    found, searched = _search_data_dir(here)
    folders = ", ".join(str(f) for f in searched)
    return ["KEYCAP_DATA_DIR (not set)", f"a .keycap folder in {folders} ({'found ' + str(found) if found else 'none'})"]


def lookup_runtime_token(env: Mapping[str, str] | None = None, cwd: str | Path | None = None) -> RuntimeTokenLookup:
    """The default lookup with its trail; ``cwd`` is where the search for ``.keycap`` starts.

    Raises ClientConfigError when ``KEYCAP_RUNTIME_TOKEN_FILE`` is set and unreadable.
    """
    e = os.environ if env is None else env
    direct = _non_empty(e, "KEYCAP_RUNTIME_TOKEN")
    if direct is not None:
        return RuntimeTokenLookup(direct, "KEYCAP_RUNTIME_TOKEN")
    here = Path(os.path.abspath(cwd if cwd is not None else os.getcwd()))
    tried = ["KEYCAP_RUNTIME_TOKEN (not set)"]
    explicit = _non_empty(e, "KEYCAP_RUNTIME_TOKEN_FILE")
    if explicit is None:
        tried += ["KEYCAP_RUNTIME_TOKEN_FILE (not set)", *_data_dir_trail(e, here)]
    path = Path(os.path.abspath(here / explicit)) if explicit else default_data_dir(e, here) / "runtime-token"
    try:
        token = path.read_text(encoding="utf-8").strip()
    except FileNotFoundError:
        if explicit is None:
            return RuntimeTokenLookup(None, None, (*tried, f"{path} (no such file)"))
        raise ClientConfigError("KEYCAP_RUNTIME_TOKEN_FILE", f"cannot read {path} (no such file)") from None
    except OSError as err:
        raise ClientConfigError("KEYCAP_RUNTIME_TOKEN_FILE", f"cannot read {path} ({err.strerror or err})") from err
    if not token:
        return RuntimeTokenLookup(None, None, (*tried, f"{path} (empty)"))
    return RuntimeTokenLookup(token, str(path), tuple(tried))


def runtime_token_from_env(env: Mapping[str, str] | None = None, cwd: str | Path | None = None) -> str | None:
    """The runtime's bearer secret by the default lookup, or None when there is none.

    Raises ClientConfigError when ``KEYCAP_RUNTIME_TOKEN_FILE`` is set and unreadable.
    """
    return lookup_runtime_token(env, cwd).token


def missing_credential_hint(env: Mapping[str, str] | None = None, cwd: str | Path | None = None) -> str:
    """What to add to a PRINCIPAL_CREDENTIAL_MISSING refusal of a call sent without a bearer:
    where the default lookup looked (now) and which settings would supply a credential."""
    try:
        found = lookup_runtime_token(env, cwd)
    except ClientConfigError as err:
        return f"this client sent no runtime credential, and the default lookup fails: {err}"
    if found.token is not None:
        return (
            f"this client sent no runtime credential, though the default lookup finds one now ({found.source}): "
            'the client was made with token="" or before it existed'
        )
    return (
        f"this client sent no runtime credential; the default lookup tried {'; '.join(found.tried)}. "
        "Run `make run` (or `keycap serve`) in this folder or one above it, which writes .keycap/runtime-token, "
        "or set KEYCAP_RUNTIME_TOKEN, KEYCAP_RUNTIME_TOKEN_FILE or KEYCAP_DATA_DIR, or pass the client's token="
    )


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
