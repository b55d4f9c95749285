"""Every key-derivation vector (test/vectors/key-derivation.json) gets the kernel's answer
from keycap_client.key_derivation: the same canonical document and key, or the same
refusal reason. Both entry points run: the exact text (parse_arguments), and, for the
vectors whose text a lenient parser reads without a loss, an already-parsed value
(check_arguments, what an MCP SDK hands the middleware)."""

from __future__ import annotations

import json
from typing import Any

import pytest

from conftest import REPO_ROOT
from keycap_client.key_derivation import (
    KeyDerivationError,
    KeyDerivationSpec,
    canonical_key_document,
    derive_key,
    derive_key_from_parsed,
    parse_arguments,
)

VECTORS: dict[str, Any] = json.loads((REPO_ROOT / "test/vectors/key-derivation.json").read_text())
LIMITS = VECTORS["limits"]
# What only the text shows (the parsed value has lost it), or what Python's lenient json
# turns into another value: these run through the text entry point only.
TEXT_ONLY = {"ARGUMENTS_DUPLICATE_MEMBER", "ARGUMENTS_NOT_JSON", "INVALID_UTF8"}


def _spec(vector: dict[str, Any]) -> KeyDerivationSpec:
    d = vector["derivation"]
    return KeyDerivationSpec(fields=d["fields"], version=d.get("version", 0), context_fields=d.get("context_fields", []))


def _text(vector: dict[str, Any]) -> str | bytes:
    if "arguments_utf8_hex" in vector:
        return bytes.fromhex(vector["arguments_utf8_hex"])
    text: str = vector["arguments_json"]
    return text


def _run_id(vector: dict[str, Any]) -> str:
    ctx = vector["context"]
    if "run_id_utf8_hex" in ctx:
        raw = bytes.fromhex(ctx["run_id_utf8_hex"])
        try:
            return raw.decode("utf-8")
        except UnicodeDecodeError:
            # What a surrogateescape decoder hands over: a lone surrogate, refused as INVALID_UTF8.
            return raw.decode("utf-8", errors="surrogateescape")
    run_id: str = ctx.get("run_id", "")
    return run_id


def _derive(vector: dict[str, Any]) -> tuple[str, str]:
    args = parse_arguments(_text(vector), max_bytes=LIMITS["max_bytes"], max_depth=LIMITS["max_depth"])
    spec, run_id = _spec(vector), _run_id(vector)
    return canonical_key_document(vector["tool_id"], spec, args, run_id), derive_key(vector["tool_id"], spec, args, run_id)


@pytest.mark.parametrize("vector", VECTORS["vectors"], ids=[v["name"] for v in VECTORS["vectors"]])
def test_vector_from_text(vector: dict[str, Any]) -> None:
    expect = vector["expect"]
    if "key" in expect:
        assert _derive(vector) == (expect["canonical"], expect["key"])
    else:
        with pytest.raises(KeyDerivationError) as caught:
            _derive(vector)
        assert caught.value.reason == expect["error"]


PARSED = [
    v
    for v in VECTORS["vectors"]
    if "arguments_json" in v and v["expect"].get("error") not in TEXT_ONLY and "run_id_utf8_hex" not in v["context"]
]


@pytest.mark.parametrize("vector", PARSED, ids=[v["name"] for v in PARSED])
def test_vector_from_parsed_arguments(vector: dict[str, Any]) -> None:
    """The value a lenient parser (Python's json, as pydantic's in the MCP SDK) produced."""
    try:
        args: Any = json.loads(vector["arguments_json"])
    except (ValueError, RecursionError):
        pytest.skip("a lenient parser refuses this text too")
    expect = vector["expect"]
    spec, run_id = _spec(vector), _run_id(vector)
    if "key" in expect:
        assert derive_key(vector["tool_id"], spec, args, run_id) == expect["key"]
    else:
        with pytest.raises(KeyDerivationError) as caught:
            derive_key(vector["tool_id"], spec, args, run_id)
        assert caught.value.reason == expect["error"]


def test_the_parsed_entry_point_refuses_what_only_a_parsed_value_can_hold() -> None:
    spec = KeyDerivationSpec(["/n"])
    for bad, reason in [
        ({"n": float("inf")}, "ARGUMENTS_NON_FINITE_NUMBER"),
        ({"n": float("nan")}, "ARGUMENTS_NON_FINITE_NUMBER"),
        ({"n": 10**400}, "ARGUMENTS_NON_FINITE_NUMBER"),
        ({"n": "\ud800"}, "ARGUMENTS_INVALID_UNICODE"),
        ({"n": (1, 2)}, "ARGUMENTS_NOT_JSON"),
        ({1: "x"}, "ARGUMENTS_NOT_JSON"),
        ([1], "ARGUMENTS_NOT_OBJECT"),
    ]:
        with pytest.raises(KeyDerivationError) as caught:
            derive_key("t", spec, bad)  # type: ignore[arg-type]
        assert caught.value.reason == reason, bad
    # A bool is not an integer here, however Python ranks it.
    assert derive_key("t", spec, {"n": True}) != derive_key("t", spec, {"n": 1})


@pytest.mark.parametrize("vector", PARSED, ids=[v["name"] for v in PARSED])
def test_vector_from_parsed_arguments_as_the_mcp_middleware_derives(vector: dict[str, Any]) -> None:
    """derive_key_from_parsed (the MCP middleware's, the TypeScript one's rule): the vector's
    key or reason, except that an integer beyond 2^53 is keyed as its double, not refused."""
    try:
        args: Any = json.loads(vector["arguments_json"])
    except (ValueError, RecursionError):
        pytest.skip("a lenient parser refuses this text too")
    expect = vector["expect"]
    spec, run_id = _spec(vector), _run_id(vector)
    limits = {"max_bytes": LIMITS["max_bytes"], "max_depth": LIMITS["max_depth"]}
    if "key" in expect:
        assert derive_key_from_parsed(vector["tool_id"], spec, args, run_id, **limits) == expect["key"]
    elif expect["error"] == "KEY_FIELD_UNSAFE_INTEGER":
        doubled = json.loads(vector["arguments_json"], parse_int=lambda t: float(t) if abs(int(t)) > 2**53 - 1 else int(t))
        assert derive_key_from_parsed(vector["tool_id"], spec, args, run_id, **limits) == derive_key(vector["tool_id"], spec, doubled, run_id)
    else:
        with pytest.raises(KeyDerivationError) as caught:
            derive_key_from_parsed(vector["tool_id"], spec, args, run_id, **limits)
        assert caught.value.reason == expect["error"]


def test_the_mcp_entry_point_limits_the_arguments_json_text() -> None:
    spec = KeyDerivationSpec(["/n"])
    # JSON.stringify's length: {"n":1,"s":"…"} is 14 bytes around the string.
    fits: dict[str, Any] = {"n": 1, "s": "x" * (100 - 14)}
    assert derive_key_from_parsed("t", spec, fits, max_bytes=100) == derive_key("t", spec, fits)
    with pytest.raises(KeyDerivationError) as caught:
        derive_key_from_parsed("t", spec, {"n": 1, "s": "x" * (101 - 14)}, max_bytes=100)
    assert caught.value.reason == "ARGUMENTS_TOO_LARGE"
