"""How a runtime declares a tool (the Python mirror of the TS ``defineTool``).

Each part checks itself against the rules in ``proto/`` when it is made
(:mod:`keycap_client.request_rules`): a definition the kernel would refuse cannot be
built, and the :class:`KeycapError` says what the kernel would (reason, field path).
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Union

from keycap_client import request_rules
from keycap_client._gen.keycap.effect.v1 import effect_pb2
from keycap_client._gen.keycap.kernel.v1 import kernel_pb2

__all__ = ["KeyDerivation", "Idempotent", "Queryable", "Unsafe", "EffectSpec", "ToolDefinition"]


@dataclass(frozen=True)
class KeyDerivation:
    """How an Idempotent tool's key is derived.

    ``fields``: RFC 6901 JSON Pointers into the arguments, e.g. ``["/order_id"]``:
    at least one, no two alike. ``version``: hashed into the key, default 1 (0 is 1).
    ``run_id``: when True the run id passed to ``begin`` enters the key, so two
    identical calls in two runs are two effects.

    Raises TypeError for ``fields`` that are not a list or tuple of str, and
    :class:`~keycap_client.KeycapError` ``INVALID_ARGUMENT`` with the kernel's reason for
    fields its rules refuse (``KEY_DERIVATION_NO_FIELDS``,
    ``KEY_DERIVATION_DUPLICATE_FIELD``, ``INVALID_JSON_POINTER``).
    """

    #: A list or tuple, not one string (a str is a Sequence[str] of its characters).
    fields: list[str] | tuple[str, ...]
    version: int = 1
    run_id: bool = False

    def __post_init__(self) -> None:
        # Checked here, before anything is sent: a bare string would become one field
        # per character ("/order_id" -> "/", "o", "r", ...); the rest is the proto's rules.
        if isinstance(self.fields, str) or not isinstance(self.fields, (list, tuple)):
            raise TypeError(f"KeyDerivation fields must be a list of JSON Pointers, e.g. [{self.fields!r}], not {type(self.fields).__name__}")
        for f in self.fields:
            if not isinstance(f, str):
                raise TypeError(f"KeyDerivation field {f!r} must be a str (a JSON Pointer), not {type(f).__name__}")
        request_rules.check(self.to_proto(), at="tool.effect_class.idempotent.key")

    def to_proto(self) -> effect_pb2.KeyDerivation:
        """The wire form (``keycap.effect.v1.KeyDerivation``)."""
        return effect_pb2.KeyDerivation(
            fields=self.fields,
            version=self.version,
            context_fields=[effect_pb2.CONTEXT_FIELD_RUN_ID] if self.run_id else [],
        )


@dataclass(frozen=True)
class Idempotent:
    """Retry-safe under the kernel-derived key. ``key`` is required: a type checker
    refuses ``Idempotent()``, and ``Idempotent(None)`` raises the kernel's
    ``KEY_DERIVATION_REQUIRED``."""

    key: KeyDerivation

    def __post_init__(self) -> None:
        if self.key is None:
            request_rules.check(effect_pb2.Idempotent(), at="tool.effect_class.idempotent")
        if not isinstance(self.key, KeyDerivation):
            raise TypeError(f"Idempotent key must be a KeyDerivation, not {type(self.key).__name__}")


@dataclass(frozen=True)
class Queryable:
    """Not retry-safe; the ledger can be asked whether the request took effect.

    ``request_id_field``: RFC 6901 JSON Pointer to the call's request id in the
    arguments, e.g. ``"/request_id"``; a :class:`~keycap_client.KeycapError` with the
    kernel's reason (``REQUEST_ID_FIELD_REQUIRED``, ``INVALID_JSON_POINTER``) otherwise.
    """

    request_id_field: str

    def __post_init__(self) -> None:
        request_rules.check(self.to_proto(), at="tool.effect_class.queryable.lookup")

    def to_proto(self) -> effect_pb2.RequestIdLookup:
        """The wire form (``keycap.effect.v1.RequestIdLookup``)."""
        return effect_pb2.RequestIdLookup(request_id_field=self.request_id_field)


@dataclass(frozen=True)
class Unsafe:
    """Never retried automatically; each capability allows one write."""


EffectSpec = Union[Idempotent, Queryable, Unsafe]


@dataclass(frozen=True)
class ToolDefinition:
    """A tool as the runtime declares it.

    ``id``: 1-128 characters of ``[A-Za-z0-9._:/-]`` (else a
    :class:`~keycap_client.KeycapError` ``INVALID_TOOL_ID``, as the kernel answers).

    Example::

        charge = ToolDefinition(
            "payments.charge",
            Idempotent(KeyDerivation(["/order_id"], run_id=True)),
        )
    """

    id: str
    effect: EffectSpec
    #: Optional JSON Schema (2020-12) of the arguments.
    arguments_schema: Mapping[str, Any] | None = field(default=None)

    def __post_init__(self) -> None:
        request_rules.check(self.to_proto(), at="tool")

    def to_proto(self) -> kernel_pb2.Tool:
        """The wire form (``keycap.kernel.v1.Tool``)."""
        return kernel_pb2.Tool(
            tool_id=self.id,
            effect_class=self._effect_class(),
            arguments_schema_json=json.dumps(self.arguments_schema, separators=(",", ":")) if self.arguments_schema else "",
        )

    def _effect_class(self) -> effect_pb2.EffectClass | None:
        if self.effect is None:  # for callers without a type checker: EFFECT_CLASS_REQUIRED
            return None
        effect = effect_pb2.EffectClass()
        if isinstance(self.effect, Idempotent):
            effect.idempotent.key.CopyFrom(self.effect.key.to_proto())
        elif isinstance(self.effect, Queryable):
            effect.queryable.lookup.CopyFrom(self.effect.to_proto())
        elif isinstance(self.effect, Unsafe):
            effect.unsafe.SetInParent()
        else:  # guarded by the type, and checked here for callers without a type checker
            raise TypeError(f"unknown effect spec {self.effect!r}")
        return effect
