"""Where a sink's verifier gets the kernel's public keys, by kid (ADR 0013 §2).

:class:`KernelJwksSource` fetches them from the kernel (``KernelService.GetSigningKeys``),
caches them, and refetches when an unknown kid shows up, at most once per cooldown;
:class:`StaticJwksSource` holds a JWKS given as text or file. Both accept public Ed25519
keys only (:func:`parse_jwks`) and parse key material once.
"""

from __future__ import annotations

import re
import threading
import time
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Protocol

import grpc
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PublicKey

from keycap_client._gen.keycap.kernel.v1 import kernel_pb2, kernel_pb2_grpc
from keycap_client.credentials import TlsOptions, resolve_credentials
from keycap_client.sink._jws import b64url_decode, parse_json
from keycap_client.sink.refusal import SinkRefusal

__all__ = ["JwksError", "parse_jwks", "PublicKeySource", "StaticJwksSource", "KernelJwksSource"]

_PRIVATE_MEMBERS = ("d", "p", "q", "dp", "dq", "qi", "k", "priv")
_X = re.compile(r"[A-Za-z0-9_-]{43}")
# A real JWKS is a few hundred bytes per key; anything this large is the wrong file.
_MAX_JWKS_FILE_BYTES = 1024 * 1024


class JwksError(ValueError):
    """A JWKS refused as a key source; the message is one line and never quotes key material."""

    def __init__(self, message: str) -> None:
        super().__init__(re.sub(r"[\r\n]+", " ", message))


def parse_jwks(text: str) -> dict[str, Ed25519PublicKey]:
    """Parses a JWKS into public Ed25519 keys by kid, as the ledger does.

    Refuses the whole set when any key holds private material or is not OKP/Ed25519: such
    a set is a configuration mistake, and quietly skipping keys would hide it.
    """
    try:
        raw = parse_json(text)
    except (ValueError, RecursionError):
        # Not echoing the parser's message: it quotes the input, which may hold a private key.
        raise JwksError("JWKS is not valid JSON") from None
    if not isinstance(raw, dict) or not isinstance(raw.get("keys"), list):
        raise JwksError('JWKS must be an object with a "keys" array')
    keys: dict[str, Ed25519PublicKey] = {}
    entries: list[object] = raw["keys"]
    for i, k in enumerate(entries):
        where = f"JWKS key {i}"
        if not isinstance(k, dict):
            raise JwksError(f"{where} is not an object")
        for member in _PRIVATE_MEMBERS:
            if member in k:
                raise JwksError(f'{where} holds private key material ("{member}"); publish public keys only')
        if k.get("kty") != "OKP" or k.get("crv") != "Ed25519":
            raise JwksError(f'{where} is not an Ed25519 key (need kty "OKP", crv "Ed25519")')
        kid = k.get("kid")
        if not isinstance(kid, str) or kid == "":
            raise JwksError(f'{where} has no "kid"')
        if "alg" in k and k["alg"] != "EdDSA":
            raise JwksError(f'{where} has alg other than "EdDSA"')
        if "use" in k and k["use"] != "sig":
            raise JwksError(f'{where} has use other than "sig"')
        x = k.get("x")
        if not isinstance(x, str) or _X.fullmatch(x) is None:
            raise JwksError(f'{where} has no valid public key ("x")')
        if kid in keys:
            raise JwksError(f"JWKS repeats kid {kid}")
        try:
            keys[kid] = Ed25519PublicKey.from_public_bytes(b64url_decode(x))
        except ValueError:
            raise JwksError(f"{where} is not a usable Ed25519 public key") from None
    return keys


class PublicKeySource(Protocol):
    """Where the verifier gets public keys. Implementations parse key material once."""

    def cached_key(self, kid: str) -> Ed25519PublicKey | None:
        """The key for ``kid`` if already known; never blocks, never raises."""
        ...

    def get_key(self, kid: str) -> Ed25519PublicKey | None:
        """The key for ``kid``, or None when the source does not know it. May block (a fetch).

        Raises SinkRefusal SIGNING_KEYS_UNAVAILABLE when it cannot tell."""
        ...


class StaticJwksSource:
    """A JWKS given once, as text or a file; for sinks without a kernel link.

    Example::

        keys = StaticJwksSource.from_file("/etc/keycap/jwks.json")
    """

    def __init__(self, keys: Mapping[str, Ed25519PublicKey]) -> None:
        self._keys = dict(keys)

    @classmethod
    def from_text(cls, text: str) -> StaticJwksSource:
        """Raises JwksError when the text is not a JWKS of public Ed25519 keys, or holds none."""
        keys = parse_jwks(text)
        if not keys:
            raise JwksError("JWKS contains no keys")
        return cls(keys)

    @classmethod
    def from_file(cls, path: str | Path) -> StaticJwksSource:
        """Reads and validates a JWKS file; raises JwksError naming the path."""
        p = Path(path)
        try:
            size = p.stat().st_size
            if size > _MAX_JWKS_FILE_BYTES:
                raise JwksError(f"JWKS file {p}: is {size} bytes; too large for a JWKS")
            text = p.read_text(encoding="utf-8")
        except OSError as err:
            raise JwksError(f"JWKS file {p}: cannot be read ({type(err).__name__})") from None
        except UnicodeDecodeError:
            raise JwksError(f"JWKS file {p}: is not UTF-8") from None
        try:
            return cls.from_text(text)
        except JwksError as err:
            raise JwksError(f"JWKS file {p}: {err}") from None

    def cached_key(self, kid: str) -> Ed25519PublicKey | None:
        return self._keys.get(kid)

    def get_key(self, kid: str) -> Ed25519PublicKey | None:
        return self._keys.get(kid)


class KernelJwksSource:
    """The kernel's published keys, cached by kid and refetched when an unknown kid shows up.

    ``fetch`` returns the JWKS JSON text; :meth:`from_kernel` makes one that calls
    ``KernelService.GetSigningKeys``. An unknown kid may be a freshly rotated-in key, so it
    triggers a refetch, at most one per ``refetch_cooldown`` seconds (default 1): lookups
    in the meantime wait for that one fetch and share it, so made-up kids cost at most one
    kernel call per cooldown. A kid is reported unknown only while the latest fetch
    succeeded; when it failed the answer is SIGNING_KEYS_UNAVAILABLE (retry), never a
    forgery verdict. A failed fetch keeps the keys already known.

    Example::

        keys = KernelJwksSource.from_kernel("127.0.0.1:50051")
    """

    def __init__(
        self,
        fetch: Callable[[], str],
        *,
        refetch_cooldown: float = 1.0,
        clock: Callable[[], float] = time.monotonic,
        sleep: Callable[[float], None] = time.sleep,
    ) -> None:
        if not refetch_cooldown >= 0:
            raise ValueError("refetch_cooldown must be >= 0")
        self._fetch = fetch
        self._cooldown = refetch_cooldown
        self._clock = clock
        self._sleep = sleep
        self._keys: dict[str, Ed25519PublicKey] = {}
        self._lock = threading.Lock()
        self._last_fetch_at: float | None = None
        self._last_error: str | None = None
        self._fetches = 0
        self._channel: grpc.Channel | None = None

    @classmethod
    def from_kernel(
        cls,
        address: str,
        *,
        tls: TlsOptions | None = None,
        credentials: grpc.ChannelCredentials | None = None,
        timeout: float = 3.0,
        refetch_cooldown: float = 1.0,
    ) -> KernelJwksSource:
        """Keys from the kernel at ``address`` over gRPC. ``tls`` (or ``credentials``): the
        kernel's CA pinned, so only the real kernel hands out keys; default insecure, for
        loopback. ``timeout``: each fetch's deadline in seconds."""
        creds = resolve_credentials(tls, credentials)
        # Reconnect quickly: with the default backoff (up to 2 min) a sink started before its
        # kernel kept answering SIGNING_KEYS_UNAVAILABLE long after the kernel was up.
        options = [("grpc.initial_reconnect_backoff_ms", 200), ("grpc.max_reconnect_backoff_ms", 1000)]
        channel = grpc.secure_channel(address, creds, options) if creds is not None else grpc.insecure_channel(address, options)
        stub = kernel_pb2_grpc.KernelServiceStub(channel)  # type: ignore[no-untyped-call]

        def fetch() -> str:
            try:
                res: kernel_pb2.GetSigningKeysResponse = stub.GetSigningKeys(kernel_pb2.GetSigningKeysRequest(), timeout=timeout)
            except grpc.RpcError as err:
                code = err.code() if isinstance(err, grpc.Call) else None
                details = err.details() if isinstance(err, grpc.Call) else None
                raise ConnectionError(f"GetSigningKeys at {address}: {code.name if code else 'failed'} {details or ''}".strip()) from None
            return res.jwks_json

        source = cls(fetch, refetch_cooldown=refetch_cooldown)
        source._channel = channel
        return source

    @property
    def fetch_count(self) -> int:
        """How many fetches were made (successful or not)."""
        return self._fetches

    def cached_key(self, kid: str) -> Ed25519PublicKey | None:
        return self._keys.get(kid)

    def get_key(self, kid: str) -> Ed25519PublicKey | None:
        key = self._keys.get(kid)
        if key is not None:
            return key
        seen = self._fetches
        with self._lock:
            # A fetch finished while this lookup waited for the lock: that is its answer.
            if self._fetches == seen:
                if self._last_fetch_at is not None:
                    wait = self._cooldown - (self._clock() - self._last_fetch_at)
                    if wait > 0:
                        self._sleep(wait)
                self._refetch()
            key = self._keys.get(kid)
            if key is not None:
                return key
            if self._last_error is not None:
                raise SinkRefusal(
                    "SIGNING_KEYS_UNAVAILABLE", f"the kernel's signing keys could not be fetched: {self._last_error}"
                )
            return None

    def refresh(self) -> None:
        """Fetches now (e.g. at start, so the first request finds the keys)."""
        with self._lock:
            self._refetch()

    def close(self) -> None:
        if self._channel is not None:
            self._channel.close()

    def _refetch(self) -> None:
        self._last_fetch_at = self._clock()
        try:
            # Replace, not merge: a key the kernel stopped publishing must stop verifying here too.
            self._keys = parse_jwks(self._fetch())
            self._last_error = None
        except Exception as err:  # any failure keeps the keys we had; the cause is the caller's answer
            self._last_error = str(err).splitlines()[0] if str(err) else type(err).__name__
        finally:
            self._fetches += 1
