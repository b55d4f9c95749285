import datetime

from google.protobuf import timestamp_pb2 as _timestamp_pb2
from keycap_client._gen.keycap.effect.v1 import effect_pb2 as _effect_pb2
from keycap_client._gen.keycap.ledger.v1 import ledger_pb2 as _ledger_pb2
from google.protobuf.internal import containers as _containers
from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from collections.abc import Iterable as _Iterable, Mapping as _Mapping
from typing import ClassVar as _ClassVar, Optional as _Optional, Union as _Union

DESCRIPTOR: _descriptor.FileDescriptor

class ListEntriesRequest(_message.Message):
    __slots__ = ("tool_id", "page_size", "page_token")
    TOOL_ID_FIELD_NUMBER: _ClassVar[int]
    PAGE_SIZE_FIELD_NUMBER: _ClassVar[int]
    PAGE_TOKEN_FIELD_NUMBER: _ClassVar[int]
    tool_id: str
    page_size: int
    page_token: str
    def __init__(self, tool_id: _Optional[str] = ..., page_size: _Optional[int] = ..., page_token: _Optional[str] = ...) -> None: ...

class ListEntriesResponse(_message.Message):
    __slots__ = ("entries", "next_page_token")
    ENTRIES_FIELD_NUMBER: _ClassVar[int]
    NEXT_PAGE_TOKEN_FIELD_NUMBER: _ClassVar[int]
    entries: _containers.RepeatedCompositeFieldContainer[_ledger_pb2.Entry]
    next_page_token: str
    def __init__(self, entries: _Optional[_Iterable[_Union[_ledger_pb2.Entry, _Mapping]]] = ..., next_page_token: _Optional[str] = ...) -> None: ...

class GetEntryRequest(_message.Message):
    __slots__ = ("entry_id", "key")
    ENTRY_ID_FIELD_NUMBER: _ClassVar[int]
    KEY_FIELD_NUMBER: _ClassVar[int]
    entry_id: str
    key: str
    def __init__(self, entry_id: _Optional[str] = ..., key: _Optional[str] = ...) -> None: ...

class GetEntryResponse(_message.Message):
    __slots__ = ("entry", "writes")
    ENTRY_FIELD_NUMBER: _ClassVar[int]
    WRITES_FIELD_NUMBER: _ClassVar[int]
    entry: _ledger_pb2.Entry
    writes: _containers.RepeatedCompositeFieldContainer[EntryWrite]
    def __init__(self, entry: _Optional[_Union[_ledger_pb2.Entry, _Mapping]] = ..., writes: _Optional[_Iterable[_Union[EntryWrite, _Mapping]]] = ...) -> None: ...

class EntryWrite(_message.Message):
    __slots__ = ("first", "payload_mismatch", "payload_sha256", "payload_size", "payload_preview", "call_id", "attempt", "capability_id", "at")
    FIRST_FIELD_NUMBER: _ClassVar[int]
    PAYLOAD_MISMATCH_FIELD_NUMBER: _ClassVar[int]
    PAYLOAD_SHA256_FIELD_NUMBER: _ClassVar[int]
    PAYLOAD_SIZE_FIELD_NUMBER: _ClassVar[int]
    PAYLOAD_PREVIEW_FIELD_NUMBER: _ClassVar[int]
    CALL_ID_FIELD_NUMBER: _ClassVar[int]
    ATTEMPT_FIELD_NUMBER: _ClassVar[int]
    CAPABILITY_ID_FIELD_NUMBER: _ClassVar[int]
    AT_FIELD_NUMBER: _ClassVar[int]
    first: bool
    payload_mismatch: bool
    payload_sha256: str
    payload_size: int
    payload_preview: bytes
    call_id: str
    attempt: int
    capability_id: str
    at: _timestamp_pb2.Timestamp
    def __init__(self, first: _Optional[bool] = ..., payload_mismatch: _Optional[bool] = ..., payload_sha256: _Optional[str] = ..., payload_size: _Optional[int] = ..., payload_preview: _Optional[bytes] = ..., call_id: _Optional[str] = ..., attempt: _Optional[int] = ..., capability_id: _Optional[str] = ..., at: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ...) -> None: ...

class Rejection(_message.Message):
    __slots__ = ("rejection_id", "tool_id", "tool_id_verified", "reason", "code", "method", "attempted_key", "capability_key", "attempted_request_id", "capability_request_id", "call_id", "capability_id", "key_id", "effect_kind", "peer", "message", "rejected_at", "count", "service", "principal")
    REJECTION_ID_FIELD_NUMBER: _ClassVar[int]
    TOOL_ID_FIELD_NUMBER: _ClassVar[int]
    TOOL_ID_VERIFIED_FIELD_NUMBER: _ClassVar[int]
    REASON_FIELD_NUMBER: _ClassVar[int]
    CODE_FIELD_NUMBER: _ClassVar[int]
    METHOD_FIELD_NUMBER: _ClassVar[int]
    ATTEMPTED_KEY_FIELD_NUMBER: _ClassVar[int]
    CAPABILITY_KEY_FIELD_NUMBER: _ClassVar[int]
    ATTEMPTED_REQUEST_ID_FIELD_NUMBER: _ClassVar[int]
    CAPABILITY_REQUEST_ID_FIELD_NUMBER: _ClassVar[int]
    CALL_ID_FIELD_NUMBER: _ClassVar[int]
    CAPABILITY_ID_FIELD_NUMBER: _ClassVar[int]
    KEY_ID_FIELD_NUMBER: _ClassVar[int]
    EFFECT_KIND_FIELD_NUMBER: _ClassVar[int]
    PEER_FIELD_NUMBER: _ClassVar[int]
    MESSAGE_FIELD_NUMBER: _ClassVar[int]
    REJECTED_AT_FIELD_NUMBER: _ClassVar[int]
    COUNT_FIELD_NUMBER: _ClassVar[int]
    SERVICE_FIELD_NUMBER: _ClassVar[int]
    PRINCIPAL_FIELD_NUMBER: _ClassVar[int]
    rejection_id: str
    tool_id: str
    tool_id_verified: bool
    reason: str
    code: str
    method: str
    attempted_key: str
    capability_key: str
    attempted_request_id: str
    capability_request_id: str
    call_id: str
    capability_id: str
    key_id: str
    effect_kind: _effect_pb2.EffectKind
    peer: str
    message: str
    rejected_at: _timestamp_pb2.Timestamp
    count: int
    service: str
    principal: str
    def __init__(self, rejection_id: _Optional[str] = ..., tool_id: _Optional[str] = ..., tool_id_verified: _Optional[bool] = ..., reason: _Optional[str] = ..., code: _Optional[str] = ..., method: _Optional[str] = ..., attempted_key: _Optional[str] = ..., capability_key: _Optional[str] = ..., attempted_request_id: _Optional[str] = ..., capability_request_id: _Optional[str] = ..., call_id: _Optional[str] = ..., capability_id: _Optional[str] = ..., key_id: _Optional[str] = ..., effect_kind: _Optional[_Union[_effect_pb2.EffectKind, str]] = ..., peer: _Optional[str] = ..., message: _Optional[str] = ..., rejected_at: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ..., count: _Optional[int] = ..., service: _Optional[str] = ..., principal: _Optional[str] = ...) -> None: ...

class ListRejectionsRequest(_message.Message):
    __slots__ = ("tool_id", "reason", "since", "until", "page_size", "page_token", "service", "call_id")
    TOOL_ID_FIELD_NUMBER: _ClassVar[int]
    REASON_FIELD_NUMBER: _ClassVar[int]
    SINCE_FIELD_NUMBER: _ClassVar[int]
    UNTIL_FIELD_NUMBER: _ClassVar[int]
    PAGE_SIZE_FIELD_NUMBER: _ClassVar[int]
    PAGE_TOKEN_FIELD_NUMBER: _ClassVar[int]
    SERVICE_FIELD_NUMBER: _ClassVar[int]
    CALL_ID_FIELD_NUMBER: _ClassVar[int]
    tool_id: str
    reason: str
    since: _timestamp_pb2.Timestamp
    until: _timestamp_pb2.Timestamp
    page_size: int
    page_token: str
    service: str
    call_id: str
    def __init__(self, tool_id: _Optional[str] = ..., reason: _Optional[str] = ..., since: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ..., until: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ..., page_size: _Optional[int] = ..., page_token: _Optional[str] = ..., service: _Optional[str] = ..., call_id: _Optional[str] = ...) -> None: ...

class ListRejectionsResponse(_message.Message):
    __slots__ = ("rejections", "next_page_token")
    REJECTIONS_FIELD_NUMBER: _ClassVar[int]
    NEXT_PAGE_TOKEN_FIELD_NUMBER: _ClassVar[int]
    rejections: _containers.RepeatedCompositeFieldContainer[Rejection]
    next_page_token: str
    def __init__(self, rejections: _Optional[_Iterable[_Union[Rejection, _Mapping]]] = ..., next_page_token: _Optional[str] = ...) -> None: ...

class GetStatsRequest(_message.Message):
    __slots__ = ()
    def __init__(self) -> None: ...

class GetStatsResponse(_message.Message):
    __slots__ = ("entries", "duplicates", "payload_mismatches", "rejections", "rejections_by_reason", "rejections_by_tool", "counted_since")
    class RejectionsByReasonEntry(_message.Message):
        __slots__ = ("key", "value")
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: str
        value: int
        def __init__(self, key: _Optional[str] = ..., value: _Optional[int] = ...) -> None: ...
    class RejectionsByToolEntry(_message.Message):
        __slots__ = ("key", "value")
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: str
        value: int
        def __init__(self, key: _Optional[str] = ..., value: _Optional[int] = ...) -> None: ...
    ENTRIES_FIELD_NUMBER: _ClassVar[int]
    DUPLICATES_FIELD_NUMBER: _ClassVar[int]
    PAYLOAD_MISMATCHES_FIELD_NUMBER: _ClassVar[int]
    REJECTIONS_FIELD_NUMBER: _ClassVar[int]
    REJECTIONS_BY_REASON_FIELD_NUMBER: _ClassVar[int]
    REJECTIONS_BY_TOOL_FIELD_NUMBER: _ClassVar[int]
    COUNTED_SINCE_FIELD_NUMBER: _ClassVar[int]
    entries: int
    duplicates: int
    payload_mismatches: int
    rejections: int
    rejections_by_reason: _containers.ScalarMap[str, int]
    rejections_by_tool: _containers.ScalarMap[str, int]
    counted_since: _timestamp_pb2.Timestamp
    def __init__(self, entries: _Optional[int] = ..., duplicates: _Optional[int] = ..., payload_mismatches: _Optional[int] = ..., rejections: _Optional[int] = ..., rejections_by_reason: _Optional[_Mapping[str, int]] = ..., rejections_by_tool: _Optional[_Mapping[str, int]] = ..., counted_since: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ...) -> None: ...
