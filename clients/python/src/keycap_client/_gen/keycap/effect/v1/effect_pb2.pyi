from keycap_client._gen.keycap.rules.v1 import refusal_pb2 as _refusal_pb2
from google.protobuf.internal import containers as _containers
from google.protobuf.internal import enum_type_wrapper as _enum_type_wrapper
from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from collections.abc import Iterable as _Iterable, Mapping as _Mapping
from typing import ClassVar as _ClassVar, Optional as _Optional, Union as _Union

DESCRIPTOR: _descriptor.FileDescriptor

class ContextField(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    CONTEXT_FIELD_UNSPECIFIED: _ClassVar[ContextField]
    CONTEXT_FIELD_RUN_ID: _ClassVar[ContextField]

class EffectKind(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    EFFECT_KIND_UNSPECIFIED: _ClassVar[EffectKind]
    EFFECT_KIND_IDEMPOTENT: _ClassVar[EffectKind]
    EFFECT_KIND_QUERYABLE: _ClassVar[EffectKind]
    EFFECT_KIND_UNSAFE: _ClassVar[EffectKind]
CONTEXT_FIELD_UNSPECIFIED: ContextField
CONTEXT_FIELD_RUN_ID: ContextField
EFFECT_KIND_UNSPECIFIED: EffectKind
EFFECT_KIND_IDEMPOTENT: EffectKind
EFFECT_KIND_QUERYABLE: EffectKind
EFFECT_KIND_UNSAFE: EffectKind

class EffectClass(_message.Message):
    __slots__ = ("idempotent", "queryable", "unsafe")
    IDEMPOTENT_FIELD_NUMBER: _ClassVar[int]
    QUERYABLE_FIELD_NUMBER: _ClassVar[int]
    UNSAFE_FIELD_NUMBER: _ClassVar[int]
    idempotent: Idempotent
    queryable: Queryable
    unsafe: Unsafe
    def __init__(self, idempotent: _Optional[_Union[Idempotent, _Mapping]] = ..., queryable: _Optional[_Union[Queryable, _Mapping]] = ..., unsafe: _Optional[_Union[Unsafe, _Mapping]] = ...) -> None: ...

class Idempotent(_message.Message):
    __slots__ = ("key",)
    KEY_FIELD_NUMBER: _ClassVar[int]
    key: KeyDerivation
    def __init__(self, key: _Optional[_Union[KeyDerivation, _Mapping]] = ...) -> None: ...

class KeyDerivation(_message.Message):
    __slots__ = ("fields", "version", "context_fields")
    FIELDS_FIELD_NUMBER: _ClassVar[int]
    VERSION_FIELD_NUMBER: _ClassVar[int]
    CONTEXT_FIELDS_FIELD_NUMBER: _ClassVar[int]
    fields: _containers.RepeatedScalarFieldContainer[str]
    version: int
    context_fields: _containers.RepeatedScalarFieldContainer[ContextField]
    def __init__(self, fields: _Optional[_Iterable[str]] = ..., version: _Optional[int] = ..., context_fields: _Optional[_Iterable[_Union[ContextField, str]]] = ...) -> None: ...

class Queryable(_message.Message):
    __slots__ = ("lookup",)
    LOOKUP_FIELD_NUMBER: _ClassVar[int]
    lookup: RequestIdLookup
    def __init__(self, lookup: _Optional[_Union[RequestIdLookup, _Mapping]] = ...) -> None: ...

class RequestIdLookup(_message.Message):
    __slots__ = ("request_id_field",)
    REQUEST_ID_FIELD_FIELD_NUMBER: _ClassVar[int]
    request_id_field: str
    def __init__(self, request_id_field: _Optional[str] = ...) -> None: ...

class Unsafe(_message.Message):
    __slots__ = ()
    def __init__(self) -> None: ...

class CompletionReceipt(_message.Message):
    __slots__ = ("call_id", "recorded_at_ms", "mac")
    CALL_ID_FIELD_NUMBER: _ClassVar[int]
    RECORDED_AT_MS_FIELD_NUMBER: _ClassVar[int]
    MAC_FIELD_NUMBER: _ClassVar[int]
    call_id: str
    recorded_at_ms: int
    mac: bytes
    def __init__(self, call_id: _Optional[str] = ..., recorded_at_ms: _Optional[int] = ..., mac: _Optional[bytes] = ...) -> None: ...
