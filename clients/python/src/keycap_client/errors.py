"""The one exception type of the keycap client."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from functools import cache
from importlib import resources
from types import MappingProxyType
from typing import Any

import grpc
from google.protobuf import descriptor_pb2, descriptor_pool, message_factory
from google.protobuf.message import Message

__all__ = ["KeycapError", "FieldViolation", "ERROR_DOMAIN", "CLIENT_ERROR_DOMAIN", "STATUS_DETAILS_KEY"]

#: The ErrorInfo domain keycap's services use.
ERROR_DOMAIN = "keycap.dev"
#: The domain of a KeycapError the client raised itself, before sending anything.
CLIENT_ERROR_DOMAIN = "keycap.dev/client"
#: The trailer that carries a binary google.rpc.Status.
STATUS_DETAILS_KEY = "grpc-status-details-bin"
_ERROR_INFO_TYPE = "google.rpc.ErrorInfo"
_BAD_REQUEST_TYPE = "google.rpc.BadRequest"


@dataclass(frozen=True)
class FieldViolation:
    """One bad field of a refused request (a ``google.rpc.BadRequest`` field violation).

    ``field``: the proto field path, e.g. ``"tool.effect_class.idempotent.key.fields[1]"``;
    ``description``: what is wrong, for people; ``reason``: the rule's reason
    (UPPER_SNAKE_CASE, e.g. ``"INVALID_JSON_POINTER"``), for code.
    """

    field: str
    description: str
    reason: str


@cache
def _rpc_types() -> tuple[type[Message], type[Message], type[Message]]:
    """google.rpc.Status, ErrorInfo and BadRequest, from the generated descriptor set.

    They live in a private descriptor pool, never protobuf's global one, so this
    package coexists with googleapis-common-protos (which registers the same
    google/rpc files globally) in any import order.
    """
    raw = resources.files("keycap_client._gen").joinpath("google_rpc.binpb").read_bytes()
    pool = descriptor_pool.DescriptorPool()
    for file in descriptor_pb2.FileDescriptorSet.FromString(raw).file:
        pool.AddSerializedFile(file.SerializeToString())
    status = message_factory.GetMessageClass(pool.FindMessageTypeByName("google.rpc.Status"))
    info = message_factory.GetMessageClass(pool.FindMessageTypeByName(_ERROR_INFO_TYPE))
    bad_request = message_factory.GetMessageClass(pool.FindMessageTypeByName(_BAD_REQUEST_TYPE))
    return status, info, bad_request


class KeycapError(Exception):
    """Every error a keycap client raises.

    Branch on :attr:`reason` (the ``google.rpc.ErrorInfo`` reason from the
    ``grpc-status-details-bin`` trailer, e.g. ``"KEY_MISMATCH"``), never on
    :attr:`message`. When the server sent no ErrorInfo (a transport failure, a
    deadline), ``reason`` is the gRPC code's name, e.g. ``"UNAVAILABLE"``.

    An ``INVALID_ARGUMENT`` refusal of a request's rules lists every failing rule in
    :attr:`field_violations` (from the server's ``google.rpc.BadRequest``, or, when the
    client refused the request before sending it, from the same rules checked here;
    :attr:`domain` is then ``"keycap.dev/client"``). :attr:`reason` is the first one's.

    Example::

        try:
            handle.write(b"...")
        except KeycapError as err:
            if err.reason == "KEY_MISMATCH":
                ...
    """

    code: grpc.StatusCode
    reason: str
    message: str
    domain: str
    metadata: Mapping[str, str]
    field_violations: tuple[FieldViolation, ...]

    def __init__(
        self,
        code: grpc.StatusCode,
        reason: str,
        message: str,
        metadata: Mapping[str, str] | None = None,
        domain: str = "",
        field_violations: Iterable[FieldViolation] = (),
    ) -> None:
        super().__init__(f"{code.name} {reason}: {message}")
        self.code = code
        self.reason = reason
        self.message = message
        self.domain = domain
        self.metadata = MappingProxyType(dict(metadata or {}))
        self.field_violations = tuple(field_violations)

    @property
    def code_name(self) -> str:
        """The gRPC status name, e.g. ``"PERMISSION_DENIED"``."""
        return self.code.name

    @classmethod
    def from_rpc_error(cls, err: grpc.RpcError) -> KeycapError:
        """Builds a KeycapError from a failed call, reading the ErrorInfo (and any
        BadRequest) from its trailer.

        The original error is kept as ``__cause__`` when raised with ``raise ... from``.
        """
        call: Any = err
        code: grpc.StatusCode = call.code() if hasattr(call, "code") else grpc.StatusCode.UNKNOWN
        message: str = (call.details() if hasattr(call, "details") else None) or ""
        trailers = call.trailing_metadata() if hasattr(call, "trailing_metadata") else None
        raw = _status_details(trailers)
        if raw is not None:
            read = cls._from_status(raw, code, message)
            if read is not None:
                return read
        return cls(code, code.name, message)

    @classmethod
    def from_status_bytes(cls, raw: bytes) -> KeycapError:
        """Builds a KeycapError from an encoded ``google.rpc.Status`` (one refused item of a
        batch, e.g. ``BeginCallResult.error_status``), read as :meth:`from_rpc_error` reads
        the trailer."""
        status_type = _rpc_types()[0]
        try:
            st: Any = status_type.FromString(raw)
            code = _CODES.get(st.code, grpc.StatusCode.UNKNOWN)
            message = str(st.message)
        except Exception:  # a malformed status is still an error, never a success
            return cls(grpc.StatusCode.UNKNOWN, "UNKNOWN", "the batch item's status could not be read")
        return cls._from_status(raw, code, message) or cls(code, code.name, message)

    @classmethod
    def _from_status(cls, raw: bytes, code: grpc.StatusCode, message: str) -> KeycapError | None:
        """The error a ``google.rpc.Status``'s ErrorInfo (and any BadRequest) describes;
        None when it has no ErrorInfo or cannot be read."""
        status_type, info_type, bad_request_type = _rpc_types()
        try:
            st: Any = status_type.FromString(raw)
            message = message or st.message
            info: Any = None
            violations: list[FieldViolation] = []
            for detail in st.details:
                name = detail.type_url.rsplit("/", 1)[-1]
                if name == _ERROR_INFO_TYPE and info is None:
                    info = info_type.FromString(detail.value)
                elif name == _BAD_REQUEST_TYPE:
                    bad: Any = bad_request_type.FromString(detail.value)
                    violations.extend(FieldViolation(v.field, v.description, v.reason) for v in bad.field_violations)
            if info is not None:
                return cls(code, info.reason, message, dict(info.metadata), info.domain, violations)
        except Exception:  # a malformed trailer never hides the real error
            pass
        return None

    def with_message(self, message: str) -> KeycapError:
        """The same error (code, reason, metadata, domain, field violations) with another message for people."""
        return KeycapError(self.code, self.reason, message, self.metadata, self.domain, self.field_violations)

    def __repr__(self) -> str:
        return f"KeycapError(code={self.code.name}, reason={self.reason!r}, message={self.message!r})"

    def __reduce__(self) -> tuple[Any, ...]:
        return (
            _rebuild,
            (self.code.name, self.reason, self.message, dict(self.metadata), self.domain, self.field_violations),
        )


#: gRPC status codes by number (google.rpc.Status.code).
_CODES = {c.value[0]: c for c in grpc.StatusCode}


def _rebuild(
    code: str,
    reason: str,
    message: str,
    metadata: dict[str, str],
    domain: str,
    field_violations: tuple[FieldViolation, ...] = (),
) -> KeycapError:
    return KeycapError(grpc.StatusCode[code], reason, message, metadata, domain, field_violations)


def _status_details(trailers: Any) -> bytes | None:
    for key, value in trailers or ():
        if key == STATUS_DETAILS_KEY and isinstance(value, bytes):
            return value
    return None
