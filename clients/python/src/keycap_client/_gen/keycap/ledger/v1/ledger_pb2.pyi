import datetime

from google.protobuf import timestamp_pb2 as _timestamp_pb2
from keycap_client._gen.keycap.effect.v1 import effect_pb2 as _effect_pb2
from keycap_client._gen.keycap.rules.v1 import refusal_pb2 as _refusal_pb2
from google.protobuf.internal import containers as _containers
from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from collections.abc import Iterable as _Iterable, Mapping as _Mapping
from typing import ClassVar as _ClassVar, Optional as _Optional, Union as _Union

DESCRIPTOR: _descriptor.FileDescriptor

class Entry(_message.Message):
    __slots__ = ("entry_id", "tool_id", "effect_kind", "call_id", "attempt", "capability_id", "key", "request_id", "payload", "payload_sha256", "recorded_at", "duplicate_count", "payload_mismatch", "payload_mismatch_count", "principal")
    ENTRY_ID_FIELD_NUMBER: _ClassVar[int]
    TOOL_ID_FIELD_NUMBER: _ClassVar[int]
    EFFECT_KIND_FIELD_NUMBER: _ClassVar[int]
    CALL_ID_FIELD_NUMBER: _ClassVar[int]
    ATTEMPT_FIELD_NUMBER: _ClassVar[int]
    CAPABILITY_ID_FIELD_NUMBER: _ClassVar[int]
    KEY_FIELD_NUMBER: _ClassVar[int]
    REQUEST_ID_FIELD_NUMBER: _ClassVar[int]
    PAYLOAD_FIELD_NUMBER: _ClassVar[int]
    PAYLOAD_SHA256_FIELD_NUMBER: _ClassVar[int]
    RECORDED_AT_FIELD_NUMBER: _ClassVar[int]
    DUPLICATE_COUNT_FIELD_NUMBER: _ClassVar[int]
    PAYLOAD_MISMATCH_FIELD_NUMBER: _ClassVar[int]
    PAYLOAD_MISMATCH_COUNT_FIELD_NUMBER: _ClassVar[int]
    PRINCIPAL_FIELD_NUMBER: _ClassVar[int]
    entry_id: str
    tool_id: str
    effect_kind: _effect_pb2.EffectKind
    call_id: str
    attempt: int
    capability_id: str
    key: str
    request_id: str
    payload: bytes
    payload_sha256: str
    recorded_at: _timestamp_pb2.Timestamp
    duplicate_count: int
    payload_mismatch: bool
    payload_mismatch_count: int
    principal: str
    def __init__(self, entry_id: _Optional[str] = ..., tool_id: _Optional[str] = ..., effect_kind: _Optional[_Union[_effect_pb2.EffectKind, str]] = ..., call_id: _Optional[str] = ..., attempt: _Optional[int] = ..., capability_id: _Optional[str] = ..., key: _Optional[str] = ..., request_id: _Optional[str] = ..., payload: _Optional[bytes] = ..., payload_sha256: _Optional[str] = ..., recorded_at: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ..., duplicate_count: _Optional[int] = ..., payload_mismatch: _Optional[bool] = ..., payload_mismatch_count: _Optional[int] = ..., principal: _Optional[str] = ...) -> None: ...

class WriteRequest(_message.Message):
    __slots__ = ("key", "request_id", "payload")
    KEY_FIELD_NUMBER: _ClassVar[int]
    REQUEST_ID_FIELD_NUMBER: _ClassVar[int]
    PAYLOAD_FIELD_NUMBER: _ClassVar[int]
    key: str
    request_id: str
    payload: bytes
    def __init__(self, key: _Optional[str] = ..., request_id: _Optional[str] = ..., payload: _Optional[bytes] = ...) -> None: ...

class WriteResponse(_message.Message):
    __slots__ = ("entry", "duplicate", "payload_mismatch", "replayed", "shadow", "completes_call", "completion_receipt")
    ENTRY_FIELD_NUMBER: _ClassVar[int]
    DUPLICATE_FIELD_NUMBER: _ClassVar[int]
    PAYLOAD_MISMATCH_FIELD_NUMBER: _ClassVar[int]
    REPLAYED_FIELD_NUMBER: _ClassVar[int]
    SHADOW_FIELD_NUMBER: _ClassVar[int]
    COMPLETES_CALL_FIELD_NUMBER: _ClassVar[int]
    COMPLETION_RECEIPT_FIELD_NUMBER: _ClassVar[int]
    entry: Entry
    duplicate: bool
    payload_mismatch: bool
    replayed: bool
    shadow: bool
    completes_call: bool
    completion_receipt: _effect_pb2.CompletionReceipt
    def __init__(self, entry: _Optional[_Union[Entry, _Mapping]] = ..., duplicate: _Optional[bool] = ..., payload_mismatch: _Optional[bool] = ..., replayed: _Optional[bool] = ..., shadow: _Optional[bool] = ..., completes_call: _Optional[bool] = ..., completion_receipt: _Optional[_Union[_effect_pb2.CompletionReceipt, _Mapping]] = ...) -> None: ...

class LookupRequestRequest(_message.Message):
    __slots__ = ("request_id",)
    REQUEST_ID_FIELD_NUMBER: _ClassVar[int]
    request_id: str
    def __init__(self, request_id: _Optional[str] = ...) -> None: ...

class LookupRequestResponse(_message.Message):
    __slots__ = ("found", "entry")
    FOUND_FIELD_NUMBER: _ClassVar[int]
    ENTRY_FIELD_NUMBER: _ClassVar[int]
    found: bool
    entry: Entry
    def __init__(self, found: _Optional[bool] = ..., entry: _Optional[_Union[Entry, _Mapping]] = ...) -> None: ...

class WritesRequest(_message.Message):
    __slots__ = ("writes",)
    WRITES_FIELD_NUMBER: _ClassVar[int]
    writes: _containers.RepeatedCompositeFieldContainer[CapabilityWrite]
    def __init__(self, writes: _Optional[_Iterable[_Union[CapabilityWrite, _Mapping]]] = ...) -> None: ...

class CapabilityWrite(_message.Message):
    __slots__ = ("capability", "write")
    CAPABILITY_FIELD_NUMBER: _ClassVar[int]
    WRITE_FIELD_NUMBER: _ClassVar[int]
    capability: str
    write: WriteRequest
    def __init__(self, capability: _Optional[str] = ..., write: _Optional[_Union[WriteRequest, _Mapping]] = ...) -> None: ...

class WritesResponse(_message.Message):
    __slots__ = ("results",)
    RESULTS_FIELD_NUMBER: _ClassVar[int]
    results: _containers.RepeatedCompositeFieldContainer[WriteResult]
    def __init__(self, results: _Optional[_Iterable[_Union[WriteResult, _Mapping]]] = ...) -> None: ...

class WriteResult(_message.Message):
    __slots__ = ("written", "error_status")
    WRITTEN_FIELD_NUMBER: _ClassVar[int]
    ERROR_STATUS_FIELD_NUMBER: _ClassVar[int]
    written: WriteResponse
    error_status: bytes
    def __init__(self, written: _Optional[_Union[WriteResponse, _Mapping]] = ..., error_status: _Optional[bytes] = ...) -> None: ...
