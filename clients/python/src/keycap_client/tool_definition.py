"""How a runtime declares a tool (the Python mirror of the TS ``defineTool``)."""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Union

from keycap_client._gen.keycap.effect.v1 import effect_pb2
from keycap_client._gen.keycap.kernel.v1 import kernel_pb2

__all__ = ["KeyDerivation", "Idempotent", "Queryable", "Unsafe", "EffectSpec", "ToolDefinition"]


@dataclass(frozen=True)
class KeyDerivation:
    """How an Idempotent tool's key is derived.

    ``fields``: RFC 6901 JSON Pointers into the arguments, e.g. ``["/order_id"]``
    (at least one; the kernel refuses an empty list). ``version``: hashed into the
    key, default 1. ``run_id``: when True the run id passed to ``begin`` enters
    the key, so two identical calls in two runs are two effects.
    """

    #: A list or tuple, not one string (a str is a Sequence[str] of its characters).
    fields: list[str] | tuple[str, ...]
    version: int = 1
    run_id: bool = False

    def __post_init__(self) -> None:
        # Checked here, before anything is sent: a bare string would become one field
        # per character ("/order_id" -> "/", "o", "r", ...), a list without fields no key.
        if isinstance(self.fields, str) or not isinstance(self.fields, (list, tuple)):
            raise TypeError(f"KeyDerivation fields must be a list of JSON Pointers, e.g. [{self.fields!r}], not {type(self.fields).__name__}")
        if len(self.fields) == 0:
            raise ValueError("KeyDerivation needs at least one field: the key is derived from them")
        for f in self.fields:
            if not isinstance(f, str) or not f.startswith("/"):
                raise ValueError(f"KeyDerivation field {f!r} must be a JSON Pointer starting with '/'")


@dataclass(frozen=True)
class Idempotent:
    """Retry-safe under the kernel-derived key. ``key`` is required."""

    key: KeyDerivation


@dataclass(frozen=True)
class Queryable:
    """Not retry-safe; the ledger can be asked whether the request took effect."""

    request_id_field: str


@dataclass(frozen=True)
class Unsafe:
    """Never retried automatically; each capability allows one write."""


EffectSpec = Union[Idempotent, Queryable, Unsafe]


@dataclass(frozen=True)
class ToolDefinition:
    """A tool as the runtime declares it.

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

    def to_proto(self) -> kernel_pb2.Tool:
        """The wire form (``keycap.kernel.v1.Tool``)."""
        effect = effect_pb2.EffectClass()
        if isinstance(self.effect, Idempotent):
            k = self.effect.key
            effect.idempotent.key.fields.extend(k.fields)
            effect.idempotent.key.version = k.version
            if k.run_id:
                effect.idempotent.key.context_fields.append(effect_pb2.CONTEXT_FIELD_RUN_ID)
        elif isinstance(self.effect, Queryable):
            effect.queryable.lookup.request_id_field = self.effect.request_id_field
        elif isinstance(self.effect, Unsafe):
            effect.unsafe.SetInParent()
        else:  # pragma: no cover - guarded by the type
            raise TypeError(f"unknown effect spec {self.effect!r}")
        return kernel_pb2.Tool(
            tool_id=self.id,
            effect_class=effect,
            arguments_schema_json=json.dumps(self.arguments_schema, separators=(",", ":")) if self.arguments_schema else "",
        )
