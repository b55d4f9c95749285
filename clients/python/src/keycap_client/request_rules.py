"""The request rules written in ``proto/``, checked before a request is sent.

The rules are protovalidate (``buf.validate``) annotations; beside each one the proto
names the reason a failing rule is refused with (``(keycap.rules.v1.field)`` /
``(keycap.rules.v1.oneof)`` = {rule, reason}, ADR 0010). Both are read from the
generated descriptors, so a refusal here is the one the kernel would answer
(``services/common/src/request-rules.ts``): the same reason (the first violation's;
``REQUEST_INVALID`` for a rule the proto names none for), the same proto field paths
(``tool.effect_class.idempotent.key.fields[1]``), one :class:`FieldViolation` per
failing rule. Every client checks every request that has rules before sending it;
:func:`refusal` is the same check for code that builds requests itself.

Example::

    err = request_rules.refusal(kernel_pb2.RegisterToolRequest(tool=tool))
    if err is not None:
        print(err.reason, [v.field for v in err.field_violations])
"""

from __future__ import annotations

import json
import math
from functools import cache
from typing import Any, cast

import grpc
import protovalidate
from google.protobuf.descriptor import Descriptor, FieldDescriptor, OneofDescriptor
from google.protobuf.message import Message
from google.protobuf.unknown_fields import UnknownFieldSet
from protovalidate import FieldPathElementPb

from keycap_client._gen.keycap.rules.v1 import refusal_pb2
from keycap_client.errors import CLIENT_ERROR_DOMAIN, FieldViolation, KeycapError

__all__ = ["UNNAMED_RULE_REASON", "has_rules", "refusal", "check"]

#: Reason of a failing rule that the proto does not name one for (as the services answer).
UNNAMED_RULE_REASON = "REQUEST_INVALID"

# Longest string a refusal repeats after "got", in code points (then "…"), as the services.
_MAX_SHOWN_CHARS = 64

# buf.validate.field / .oneof / .message: extension 1159 of Field/Oneof/MessageOptions.
# The stubs do not import buf/validate/validate.proto (generate.sh), so in our
# descriptors it is an unknown field of the options; it is also looked for as a known
# extension, in case another copy of validate.proto is in the pool.
_VALIDATE_OPTION = 1159

_INT64_TYPES = frozenset(
    {
        FieldDescriptor.TYPE_INT64,
        FieldDescriptor.TYPE_UINT64,
        FieldDescriptor.TYPE_SINT64,
        FieldDescriptor.TYPE_FIXED64,
        FieldDescriptor.TYPE_SFIXED64,
    }
)


@cache
def _validator() -> protovalidate.Validator:
    # One validator for the process: it caches what it compiles from each descriptor.
    return protovalidate.Validator()


def check(request: Message, *, at: str = "") -> None:
    """Raises the :func:`refusal` of ``request``, if it has one; returns when every rule holds."""
    err = refusal(request, at=at)
    if err is not None:
        raise err


def refusal(request: Message, *, at: str = "") -> KeycapError | None:
    """The client-side refusal of ``request``, or None when every rule of its message holds.

    The refusal is a :class:`KeycapError` ``INVALID_ARGUMENT`` with domain
    ``keycap.dev/client``, the first violation's reason, ``metadata["field"]`` its path,
    and every violation in ``field_violations``. ``at``: where ``request`` sits in the
    request it will be part of (``"tool.effect_class.idempotent.key"`` for a
    KeyDerivation), prefixed to every path so they read as the kernel's would. A rule
    that cannot be compiled is a defect in ``proto/`` and raises protovalidate's own error.
    """
    desc = cast(Descriptor, request.DESCRIPTOR)
    if not has_rules(desc):
        return None
    found = _validator().collect_violations(request)
    if not found:
        return None
    violations: list[FieldViolation] = []
    for v in found:
        pb = v.proto
        elements = list(pb.field.elements) if pb.field is not None else []  # none: a message rule
        field = _path_string(elements, at)
        owner = _owner(desc, elements)
        reason = _reason_for(owner, pb.rule_id) if owner is not None else None
        got = _scalar_at(request, elements)
        description = pb.message if got is None else f"{pb.message} (got {got})"
        violations.append(FieldViolation(field, description, reason or UNNAMED_RULE_REASON))
    first = violations[0]
    return KeycapError(
        grpc.StatusCode.INVALID_ARGUMENT,
        first.reason,
        f"{first.field}: {first.description} (not sent)",
        {"field": first.field},
        CLIENT_ERROR_DOMAIN,
        violations,
    )


@cache
def has_rules(desc: Descriptor) -> bool:
    """Whether the message, or any message it contains, has a rule (cached per message)."""
    return _has_rules_within(desc, set())


def _has_rules_within(desc: Descriptor, seen: set[str]) -> bool:
    if desc.full_name in seen:
        return False
    seen.add(desc.full_name)
    if _has_validate_option(desc.GetOptions()) or any(_has_validate_option(o.GetOptions()) for o in desc.oneofs):
        return True
    for f in desc.fields:
        if _has_validate_option(f.GetOptions()):
            return True
        if f.message_type is not None and _has_rules_within(f.message_type, seen):
            return True
    return False


def _has_validate_option(options: Message) -> bool:
    if any(fd.number == _VALIDATE_OPTION for fd, _ in options.ListFields()):
        return True
    unknown = UnknownFieldSet(options)
    return any(unknown[i].field_number == _VALIDATE_OPTION for i in range(len(unknown)))


def _path_string(elements: list[FieldPathElementPb], at: str) -> str:
    """The path as protobuf-es prints it: ``a.b[1].c``, ``m["k"]``, ``[pkg.ext]``."""
    out: list[str] = [at] if at else []
    for e in elements:
        if e.field_name.startswith("["):  # an extension, "[pkg.ext]"
            out.append(e.field_name)
        else:
            out.append(("." if out else "") + e.field_name)
        sub = e.subscript
        if sub is None:
            continue
        if sub.field == "string_key":
            out.append("[" + json.dumps(str(sub.value), ensure_ascii=False) + "]")
        elif sub.field == "bool_key":
            out.append("[true]" if sub.value else "[false]")
        else:  # index, int_key, uint_key
            out.append(f"[{sub.value}]")
    return "".join(out)


def _owner(root: Descriptor, elements: list[FieldPathElementPb]) -> FieldDescriptor | OneofDescriptor | None:
    """The field or oneof the violation's path ends at; for a list item, the list field
    (a rule on a list's items has its reason on the list field)."""
    desc: Descriptor | None = root
    owner: FieldDescriptor | OneofDescriptor | None = None
    for e in elements:
        if desc is None:
            return None
        fd = desc.fields_by_number.get(e.field_number) if e.field_number else None
        if fd is not None and fd.name == e.field_name:
            owner = fd
            desc = fd.message_type
            if fd.message_type is not None and fd.message_type.GetOptions().map_entry:
                desc = fd.message_type.fields_by_name["value"].message_type
        elif e.field_name in desc.oneofs_by_name:
            owner = desc.oneofs_by_name[e.field_name]
            desc = None
        else:  # an extension, or a field these descriptors do not know
            return None
    return owner


def _reason_for(owner: FieldDescriptor | OneofDescriptor, rule_id: str) -> str | None:
    refusals: list[Any] = []
    if isinstance(owner, FieldDescriptor):
        refusals.extend(_options(owner).Extensions[refusal_pb2.field])
        # A oneof's "required" is the oneof's rule; an engine may report it on a field.
        if owner.containing_oneof is not None:
            refusals.extend(_options(owner.containing_oneof).Extensions[refusal_pb2.oneof])
    else:
        refusals.extend(_options(owner).Extensions[refusal_pb2.oneof])
    return next((str(r.reason) for r in refusals if r.rule == rule_id), None)


def _options(el: FieldDescriptor | OneofDescriptor) -> Any:
    # The generated .pyi types the extensions as plain FieldDescriptors, which the
    # typed Extensions mapping does not take as keys.
    return el.GetOptions()


def _scalar_at(message: Message, elements: list[FieldPathElementPb]) -> str | None:
    """The string or number at the path as JSON (what the services show after "got"),
    if that is what is there and it is set; as protobuf-es sees it, so the descriptions
    match: an implicit-presence field at its zero value is not set, a 64-bit integer
    (a bigint there) is not a number."""
    at: Any = message
    fd: FieldDescriptor | None = None
    for e in elements:
        if not isinstance(at, Message):
            return None
        fields = cast(Descriptor, at.DESCRIPTOR).fields_by_number
        fd = fields.get(e.field_number) if e.field_number else None
        if fd is None or fd.name != e.field_name:
            return None  # a oneof, an extension
        sub = e.subscript
        if fd.is_repeated:
            if sub is None or fd.message_type is not None and fd.message_type.GetOptions().map_entry:
                return None  # the list itself; map values are not shown
            items = getattr(at, fd.name)
            index = int(sub.value)
            if index >= len(items):
                return None
            at = items[index]
        elif not _is_set(at, fd):
            return None
        else:
            at = getattr(at, fd.name)
    if fd is None or fd.type in _INT64_TYPES or fd.type == FieldDescriptor.TYPE_BOOL:
        return None
    if isinstance(at, str):
        # A refused value can be large (a 4 KiB detail): shown cut as the services cut it.
        shown = at if len(at) <= _MAX_SHOWN_CHARS else at[:_MAX_SHOWN_CHARS] + "\u2026"
        return json.dumps(shown, ensure_ascii=False)
    if isinstance(at, float):
        if not math.isfinite(at):
            return "null"  # JSON.stringify(NaN)
        return str(int(at)) if at.is_integer() else repr(at)
    if isinstance(at, int) and not isinstance(at, bool):
        return str(at)
    return None


def _is_set(message: Message, fd: FieldDescriptor) -> bool:
    if fd.has_presence:
        return message.HasField(fd.name)
    value = getattr(message, fd.name)
    return bool(value != fd.default_value)
