"""keycap's idempotency-key scheme v1, in Python (docs/decisions/0002-key-derivation-scheme.md).

    key = base64url_nopad(SHA-256(UTF-8("keycap/idempotency-key/v1") || 0x00 || UTF-8(JCS(doc))))
    doc = {"tool_id": ..., "derivation_version": n, "fields": {pointer: value}, "context": {"run_id": ...} or {}}

The kernel derives every key; a sink that holds a call's arguments derives it again to see
that the arguments belong to the capability's key (ADR 0026). Both must get the same bytes,
so this module refuses, with the kernel's reasons, every input that would let two different
calls share a key: duplicate members, non-finite numbers, lone surrogates, a named field that
is missing or null or holds an integer beyond ±(2^53-1). JCS is RFC 8785 (``rfc8785``).

Two entry points for the arguments: :func:`parse_arguments` reads the exact JSON text
(strict RFC 8259 + I-JSON, as the kernel's parser); :func:`check_arguments` checks a value
some other parser already produced (an MCP SDK's), as far as a parsed value still shows a
problem (a duplicate member, for one, is gone once parsed). :func:`derive_key_from_parsed`
is the MCP middleware's: parsed arguments keyed as the TypeScript middleware keys them.
Published vectors: test/vectors/key-derivation.json.
"""

from __future__ import annotations

import base64
import hashlib
import json
import math
import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import Final, Union

import rfc8785

from keycap_client import reasons

__all__ = [
    "KEY_SCHEME",
    "MAX_ARGUMENT_BYTES",
    "MAX_ARGUMENT_DEPTH",
    "JsonValue",
    "KeyDerivationError",
    "KeyDerivationSpec",
    "canonical_key_document",
    "check_arguments",
    "derive_key",
    "derive_key_from_parsed",
    "parse_arguments",
    "parse_json_pointer",
    "validate_derivation",
]

#: The scheme's domain tag, hashed in front of every canonical document.
KEY_SCHEME: Final = "keycap/idempotency-key/v1"
#: The kernel's default limits (ADR 0002): 64 KiB of UTF-8, 32 levels of containers.
MAX_ARGUMENT_BYTES: Final = 65536
MAX_ARGUMENT_DEPTH: Final = 32
_MAX_SAFE_INTEGER: Final = 2**53 - 1
_DOMAIN_PREFIX: Final = KEY_SCHEME.encode("utf-8") + b"\x00"

JsonValue = Union[None, bool, int, float, str, list["JsonValue"], dict[str, "JsonValue"]]

_CONTEXT_FIELDS: Final = ("run_id",)
_BAD_TILDE = re.compile(r"~(?![01])")
_SURROGATE = re.compile("[\ud800-\udfff]")
_ARRAY_INDEX = re.compile(r"(?:0|[1-9][0-9]*)\Z", re.ASCII)


class KeyDerivationError(ValueError):
    """The call cannot be keyed. ``reason``: the kernel's reason for the same input (all
    INVALID_ARGUMENT); ``field``: the argument or derivation field concerned, when one is."""

    code_name: Final = "INVALID_ARGUMENT"

    def __init__(self, reason: str, message: str, field: str | None = None) -> None:
        super().__init__(message)
        self.reason = reason
        self.message = message
        self.field = field


@dataclass(frozen=True)
class KeyDerivationSpec:
    """A tool's key derivation (``KeyDerivation`` in effect.proto): RFC 6901 pointers into the
    arguments, its version (0, protobuf's "not set", is 1), and the context fields it names."""

    fields: Sequence[str]
    version: int = 1
    context_fields: Sequence[str] = field(default_factory=tuple)


def derive_key(tool_id: str, spec: KeyDerivationSpec, arguments: JsonValue, run_id: str = "") -> str:
    """The key the kernel derives for this call (43 characters of base64url).

    ``arguments``: the parsed arguments object, checked with :func:`check_arguments` here.
    ``run_id``: the call's run; enters the key only when ``spec`` names it."""
    canonical = canonical_key_document(tool_id, spec, arguments, run_id)
    digest = hashlib.sha256(_DOMAIN_PREFIX + canonical.encode("utf-8")).digest()
    return base64.urlsafe_b64encode(digest).rstrip(b"=").decode("ascii")


def derive_key_from_parsed(
    tool_id: str,
    spec: KeyDerivationSpec,
    arguments: object,
    run_id: str = "",
    *,
    max_bytes: int = MAX_ARGUMENT_BYTES,
    max_depth: int = MAX_ARGUMENT_DEPTH,
) -> str:
    """The key of arguments another parser already produced (an MCP SDK's), derived as the
    TypeScript middleware derives it (services/sink/src/argument-binding.ts, which writes
    them out with JSON.stringify and reads them back strictly).

    Every check of :func:`check_arguments`, then ``max_bytes`` on their JSON text (as
    JSON.stringify writes it: RFC 8785's number and string forms, whose lengths are
    JSON.stringify's), then :func:`derive_key`. One text rule does not apply: an integer
    beyond ±(2^53-1) is not refused KEY_FIELD_UNSAFE_INTEGER but taken as the double
    JSON.parse makes of it, as TypeScript does. Its JSON text is gone, so there is no
    rounding left to detect (``1e20`` and ``100000000000000000000`` are the same value), and
    the kernel refuses such a key field in the text it receives, so no capability the
    kernel minted carries a key it could match: the call is still refused KEY_MISMATCH,
    with the derived key, in every language."""
    args = _as_doubles(check_arguments(arguments, max_depth=max_depth))
    size = len(rfc8785.dumps(args))
    if size > max_bytes:
        raise KeyDerivationError(reasons.ARGUMENTS_TOO_LARGE, f"arguments are {size} bytes of UTF-8, more than {max_bytes}")
    assert isinstance(args, dict)
    return derive_key(tool_id, spec, args, run_id)


def validate_derivation(spec: KeyDerivationSpec) -> None:
    """KeyDerivationError with ADR 0002's reason (KEY_DERIVATION_NO_FIELDS,
    INVALID_JSON_POINTER, …) when ``spec`` is not a usable derivation; the checks
    :func:`derive_key` makes of it, without arguments."""
    _parse_spec(spec)


def canonical_key_document(tool_id: str, spec: KeyDerivationSpec, arguments: JsonValue, run_id: str = "") -> str:
    """The RFC 8785 document :func:`derive_key` hashes, with the same checks, in the kernel's
    order: the arguments, the derivation (re-checked, never trusted), the tool id, each named
    field in the derivation's order (missing, null, unsafe integer), then the run id."""
    args = check_arguments(arguments)
    pointers = _parse_spec(spec)
    if not isinstance(tool_id, str) or tool_id == "":
        raise KeyDerivationError(reasons.TOOL_ID_REQUIRED, "tool_id must be a non-empty string to derive a key", "tool_id")
    fields: dict[str, JsonValue] = {}
    for pointer, tokens in pointers:
        value = _resolve(args, tokens)
        if isinstance(value, _Missing):
            raise KeyDerivationError(reasons.KEY_FIELD_MISSING, f"arguments: key field {pointer} is missing", pointer)
        if value is None:
            raise KeyDerivationError(reasons.KEY_FIELD_NULL, f"arguments: key field {pointer} is null", pointer)
        unsafe = _unsafe_integer_at(value, pointer)
        if unsafe is not None:
            raise KeyDerivationError(
                reasons.KEY_FIELD_UNSAFE_INTEGER,
                f"arguments: key field {pointer} holds an integer beyond ±(2^53-1) at {unsafe}; send it as a string",
                unsafe,
            )
        fields[pointer] = value
    context: dict[str, JsonValue] = {}
    if "run_id" in spec.context_fields:
        if not isinstance(run_id, str) or run_id == "":
            raise KeyDerivationError(reasons.RUN_ID_REQUIRED, "run_id is required: this tool's key derivation names the run id", "run_id")
        if _SURROGATE.search(run_id):
            # A protobuf string cannot carry one; the kernel refuses it as ill-formed UTF-8.
            raise KeyDerivationError(reasons.INVALID_UTF8, "run_id is not well-formed Unicode", "run_id")
        context["run_id"] = run_id
    doc: dict[str, JsonValue] = {
        "tool_id": tool_id,
        "derivation_version": 1 if spec.version == 0 else spec.version,
        "fields": fields,
        "context": context,
    }
    return rfc8785.dumps(doc).decode("utf-8")


def parse_arguments(
    text: str | bytes, *, max_bytes: int = MAX_ARGUMENT_BYTES, max_depth: int = MAX_ARGUMENT_DEPTH
) -> dict[str, JsonValue]:
    """The arguments object of ``text``, parsed as strictly as the kernel does.

    Bytes must be well-formed UTF-8 (INVALID_UTF8, never replaced). Refuses with the
    kernel's reasons: more than ``max_bytes``, anything not RFC 8259 (a BOM, NaN, comments,
    trailing commas, non-JSON whitespace), a duplicate member (after decoding escapes),
    a number beyond a double, a lone surrogate, nesting past ``max_depth``, not an object.
    An input with several problems may get another of those reasons than the kernel's
    first-in-text one; the reason set and every single-problem input agree."""
    if isinstance(text, bytes):
        try:
            decoded = text.decode("utf-8", errors="strict")
        except UnicodeDecodeError:
            raise KeyDerivationError(reasons.INVALID_UTF8, "arguments are not well-formed UTF-8") from None
        size = len(text)
    else:
        if _SURROGATE.search(text):
            # A raw lone surrogate has no UTF-8 form at all (escaped ones are checked below).
            raise KeyDerivationError(reasons.INVALID_UTF8, "arguments are not well-formed Unicode")
        decoded, size = text, len(text.encode("utf-8"))
    if size > max_bytes:
        raise KeyDerivationError(reasons.ARGUMENTS_TOO_LARGE, f"arguments are {size} bytes of UTF-8, more than {max_bytes}")
    try:
        # Python's own whitespace set is RFC 8259's, it refuses a BOM and raw control
        # characters; the hooks refuse what it would otherwise accept or collapse.
        value = json.loads(
            decoded,
            object_pairs_hook=_object_without_duplicates,
            parse_constant=_refuse_constant,
            parse_float=_finite_float,
            parse_int=_finite_int,
        )
    except KeyDerivationError:
        raise
    except RecursionError:
        raise KeyDerivationError(reasons.ARGUMENTS_TOO_DEEP, f"arguments nest deeper than {max_depth}") from None
    except ValueError as err:
        raise KeyDerivationError(reasons.ARGUMENTS_NOT_JSON, f"arguments are not JSON: {err}") from None
    return check_arguments(value, max_depth=max_depth)


def check_arguments(value: object, *, max_depth: int = MAX_ARGUMENT_DEPTH) -> dict[str, JsonValue]:
    """``value`` as an arguments object, or KeyDerivationError: a JSON object of JSON values
    (str keys; None, bool, int, finite float, str, list, dict), no deeper than ``max_depth``
    containers, with no lone surrogate in a string or member name."""
    _check_value(value, 1, max_depth)
    if not isinstance(value, dict):
        raise KeyDerivationError(reasons.ARGUMENTS_NOT_OBJECT, "arguments must be a JSON object")
    return value


def parse_json_pointer(pointer: str) -> list[str]:
    """The reference tokens of an RFC 6901 pointer; "" (the whole document) is refused."""
    if pointer == "":
        raise KeyDerivationError(reasons.INVALID_JSON_POINTER, 'JSON pointer "" names the whole arguments document', pointer)
    if not pointer.startswith("/"):
        raise KeyDerivationError(reasons.INVALID_JSON_POINTER, f"JSON pointer {pointer!r} must start with '/'", pointer)
    if _BAD_TILDE.search(pointer):
        raise KeyDerivationError(reasons.INVALID_JSON_POINTER, f"JSON pointer {pointer!r} has a '~' not followed by 0 or 1", pointer)
    if _SURROGATE.search(pointer):
        raise KeyDerivationError(reasons.INVALID_JSON_POINTER, "JSON pointer contains a lone surrogate", pointer)
    # "~1" before "~0", so "~01" is "~1" and not "/" (RFC 6901 §4).
    return [t.replace("~1", "/").replace("~0", "~") for t in pointer[1:].split("/")]


# --- internals -----------------------------------------------------------------


class _Missing:
    pass


_MISSING: Final = _Missing()


def _parse_spec(spec: KeyDerivationSpec) -> list[tuple[str, list[str]]]:
    if len(spec.fields) == 0:
        raise KeyDerivationError(reasons.KEY_DERIVATION_NO_FIELDS, "key.fields is empty", "key.fields")
    version = spec.version
    if isinstance(version, bool) or not isinstance(version, int) or not 0 <= version <= _MAX_SAFE_INTEGER:
        raise KeyDerivationError(reasons.KEY_DERIVATION_BAD_VERSION, f"key.version must be an integer >= 1, got {version!r}", "key.version")
    for i, name in enumerate(spec.context_fields):
        if name not in _CONTEXT_FIELDS or list(spec.context_fields).index(name) != i:
            raise KeyDerivationError(
                reasons.KEY_DERIVATION_BAD_CONTEXT_FIELD, f"key.context_fields[{i}] must be run_id, once", f"key.context_fields[{i}]"
            )
    seen: set[str] = set()
    out: list[tuple[str, list[str]]] = []
    for i, pointer in enumerate(spec.fields):
        if not isinstance(pointer, str):
            raise KeyDerivationError(reasons.INVALID_JSON_POINTER, f"key.fields[{i}] is not a string", f"key.fields[{i}]")
        tokens = parse_json_pointer(pointer)
        # RFC 6901 escaping is a bijection: equal strings are exactly equal pointers.
        if pointer in seen:
            raise KeyDerivationError(reasons.KEY_DERIVATION_DUPLICATE_FIELD, f"key.fields[{i}]: {pointer} is named twice", f"key.fields[{i}]")
        seen.add(pointer)
        out.append((pointer, tokens))
    return out


def _resolve(value: JsonValue, tokens: Iterable[str]) -> JsonValue | _Missing:
    current: JsonValue = value
    for token in tokens:
        if isinstance(current, list):
            # "-", "01" and out-of-range indices name nothing (RFC 6901 §4).
            if not _ARRAY_INDEX.match(token) or int(token) >= len(current):
                return _MISSING
            current = current[int(token)]
        elif isinstance(current, dict):
            if token not in current:
                return _MISSING
            current = current[token]
        else:
            return _MISSING
    return current


def _unsafe_integer_at(value: JsonValue, pointer: str) -> str | None:
    """The pointer of the first integer beyond ±(2^53-1) at or under ``value`` (a Python int
    kept it exactly; JSON.parse would have rounded it, so two ids would share a key)."""
    if isinstance(value, bool):
        return None
    if isinstance(value, int):
        return pointer if abs(value) > _MAX_SAFE_INTEGER else None
    if isinstance(value, list):
        for i, item in enumerate(value):
            found = _unsafe_integer_at(item, f"{pointer}/{i}")
            if found is not None:
                return found
    elif isinstance(value, dict):
        for name, item in value.items():
            found = _unsafe_integer_at(item, f"{pointer}/{name.replace('~', '~0').replace('/', '~1')}")
            if found is not None:
                return found
    return None


def _as_doubles(value: JsonValue) -> JsonValue:
    """``value`` with every integer beyond ±(2^53-1) replaced by the double nearest to it (what
    JSON.parse makes of its text; Python rounds an int to float the same way, half to even)."""
    if isinstance(value, bool):
        return value
    if isinstance(value, int):
        return float(value) if abs(value) > _MAX_SAFE_INTEGER else value
    if isinstance(value, list):
        return [_as_doubles(item) for item in value]
    if isinstance(value, dict):
        return {name: _as_doubles(item) for name, item in value.items()}
    return value


def _check_value(value: object, depth: int, max_depth: int) -> None:
    if value is None or isinstance(value, bool):
        return
    if isinstance(value, int):
        try:
            float(value)
        except OverflowError:
            # JSON.parse makes such an integer Infinity: the kernel refuses it as non-finite.
            raise KeyDerivationError(reasons.ARGUMENTS_NON_FINITE_NUMBER, "arguments hold a number that overflows a double") from None
        return
    if isinstance(value, float):
        if not math.isfinite(value):
            raise KeyDerivationError(reasons.ARGUMENTS_NON_FINITE_NUMBER, "arguments hold a number that is not finite")
        return
    if isinstance(value, str):
        if _SURROGATE.search(value):
            raise KeyDerivationError(reasons.ARGUMENTS_INVALID_UNICODE, "arguments hold a lone surrogate in a string")
        return
    if isinstance(value, (list, dict)):
        if depth > max_depth:
            raise KeyDerivationError(reasons.ARGUMENTS_TOO_DEEP, f"arguments nest deeper than {max_depth}")
        if isinstance(value, dict):
            for name, item in value.items():
                if not isinstance(name, str):
                    raise KeyDerivationError(reasons.ARGUMENTS_NOT_JSON, "arguments hold a member name that is not a string")
                if _SURROGATE.search(name):
                    raise KeyDerivationError(reasons.ARGUMENTS_INVALID_UNICODE, "arguments hold a lone surrogate in a member name")
                _check_value(item, depth + 1, max_depth)
        else:
            for item in value:
                _check_value(item, depth + 1, max_depth)
        return
    raise KeyDerivationError(reasons.ARGUMENTS_NOT_JSON, f"arguments hold a {type(value).__name__}, which is not a JSON value")


def _object_without_duplicates(pairs: list[tuple[str, JsonValue]]) -> dict[str, JsonValue]:
    out: dict[str, JsonValue] = {}
    for name, value in pairs:
        if name in out:
            raise KeyDerivationError(reasons.ARGUMENTS_DUPLICATE_MEMBER, "arguments name a member twice in one object")
        out[name] = value
    return out


def _refuse_constant(name: str) -> float:
    # NaN, Infinity and -Infinity are not JSON (RFC 8259 §6).
    raise ValueError(f"{name} is not a JSON value")


def _finite_int(text: str) -> int:
    # Before int(): past 4300 digits Python refuses the conversion (CVE-2020-10735), and
    # past ~309 the value is Infinity to JSON.parse anyway, so non-finite is the kernel's word.
    if len(text) > 400:
        raise KeyDerivationError(reasons.ARGUMENTS_NON_FINITE_NUMBER, "arguments hold a number that overflows a double")
    return int(text)


def _finite_float(text: str) -> float:
    f = float(text)
    if not math.isfinite(f):
        raise KeyDerivationError(reasons.ARGUMENTS_NON_FINITE_NUMBER, "arguments hold a number that overflows a double")
    return f
