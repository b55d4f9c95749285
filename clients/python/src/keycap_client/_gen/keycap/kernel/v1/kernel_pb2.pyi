import datetime

from google.protobuf import timestamp_pb2 as _timestamp_pb2
from keycap_client._gen.keycap.effect.v1 import destination_pb2 as _destination_pb2
from keycap_client._gen.keycap.effect.v1 import effect_pb2 as _effect_pb2
from keycap_client._gen.keycap.rules.v1 import refusal_pb2 as _refusal_pb2
from google.protobuf.internal import containers as _containers
from google.protobuf.internal import enum_type_wrapper as _enum_type_wrapper
from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from collections.abc import Iterable as _Iterable, Mapping as _Mapping
from typing import ClassVar as _ClassVar, Optional as _Optional, Union as _Union

DESCRIPTOR: _descriptor.FileDescriptor

class RunMode(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    RUN_MODE_UNSPECIFIED: _ClassVar[RunMode]
    RUN_MODE_LIVE: _ClassVar[RunMode]
    RUN_MODE_SHADOW: _ClassVar[RunMode]
    RUN_MODE_REPLAY: _ClassVar[RunMode]

class CallState(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    CALL_STATE_UNSPECIFIED: _ClassVar[CallState]
    CALL_STATE_PENDING: _ClassVar[CallState]
    CALL_STATE_COMPLETED: _ClassVar[CallState]
    CALL_STATE_INDETERMINATE: _ClassVar[CallState]

class CallOutcome(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    CALL_OUTCOME_UNSPECIFIED: _ClassVar[CallOutcome]
    CALL_OUTCOME_SUCCEEDED: _ClassVar[CallOutcome]
    CALL_OUTCOME_FAILED: _ClassVar[CallOutcome]

class ResumeAction(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    RESUME_ACTION_UNSPECIFIED: _ClassVar[ResumeAction]
    RESUME_ACTION_RETRY: _ClassVar[ResumeAction]
    RESUME_ACTION_DONE: _ClassVar[ResumeAction]
    RESUME_ACTION_ALREADY_COMPLETED: _ClassVar[ResumeAction]
    RESUME_ACTION_LEFT_PENDING: _ClassVar[ResumeAction]
RUN_MODE_UNSPECIFIED: RunMode
RUN_MODE_LIVE: RunMode
RUN_MODE_SHADOW: RunMode
RUN_MODE_REPLAY: RunMode
CALL_STATE_UNSPECIFIED: CallState
CALL_STATE_PENDING: CallState
CALL_STATE_COMPLETED: CallState
CALL_STATE_INDETERMINATE: CallState
CALL_OUTCOME_UNSPECIFIED: CallOutcome
CALL_OUTCOME_SUCCEEDED: CallOutcome
CALL_OUTCOME_FAILED: CallOutcome
RESUME_ACTION_UNSPECIFIED: ResumeAction
RESUME_ACTION_RETRY: ResumeAction
RESUME_ACTION_DONE: ResumeAction
RESUME_ACTION_ALREADY_COMPLETED: ResumeAction
RESUME_ACTION_LEFT_PENDING: ResumeAction

class Tool(_message.Message):
    __slots__ = ("tool_id", "effect_class", "arguments_schema_json", "registered_at", "owner", "http_destination")
    TOOL_ID_FIELD_NUMBER: _ClassVar[int]
    EFFECT_CLASS_FIELD_NUMBER: _ClassVar[int]
    ARGUMENTS_SCHEMA_JSON_FIELD_NUMBER: _ClassVar[int]
    REGISTERED_AT_FIELD_NUMBER: _ClassVar[int]
    OWNER_FIELD_NUMBER: _ClassVar[int]
    HTTP_DESTINATION_FIELD_NUMBER: _ClassVar[int]
    tool_id: str
    effect_class: _effect_pb2.EffectClass
    arguments_schema_json: str
    registered_at: _timestamp_pb2.Timestamp
    owner: str
    http_destination: _destination_pb2.HttpDestination
    def __init__(self, tool_id: _Optional[str] = ..., effect_class: _Optional[_Union[_effect_pb2.EffectClass, _Mapping]] = ..., arguments_schema_json: _Optional[str] = ..., registered_at: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ..., owner: _Optional[str] = ..., http_destination: _Optional[_Union[_destination_pb2.HttpDestination, _Mapping]] = ...) -> None: ...

class RegisterToolRequest(_message.Message):
    __slots__ = ("tool",)
    TOOL_FIELD_NUMBER: _ClassVar[int]
    tool: Tool
    def __init__(self, tool: _Optional[_Union[Tool, _Mapping]] = ...) -> None: ...

class RegisterToolResponse(_message.Message):
    __slots__ = ("tool", "already_registered")
    TOOL_FIELD_NUMBER: _ClassVar[int]
    ALREADY_REGISTERED_FIELD_NUMBER: _ClassVar[int]
    tool: Tool
    already_registered: bool
    def __init__(self, tool: _Optional[_Union[Tool, _Mapping]] = ..., already_registered: _Optional[bool] = ...) -> None: ...

class GetToolRequest(_message.Message):
    __slots__ = ("tool_id",)
    TOOL_ID_FIELD_NUMBER: _ClassVar[int]
    tool_id: str
    def __init__(self, tool_id: _Optional[str] = ...) -> None: ...

class GetToolResponse(_message.Message):
    __slots__ = ("tool",)
    TOOL_FIELD_NUMBER: _ClassVar[int]
    tool: Tool
    def __init__(self, tool: _Optional[_Union[Tool, _Mapping]] = ...) -> None: ...

class ListToolsRequest(_message.Message):
    __slots__ = ("page_size", "page_token")
    PAGE_SIZE_FIELD_NUMBER: _ClassVar[int]
    PAGE_TOKEN_FIELD_NUMBER: _ClassVar[int]
    page_size: int
    page_token: str
    def __init__(self, page_size: _Optional[int] = ..., page_token: _Optional[str] = ...) -> None: ...

class ListToolsResponse(_message.Message):
    __slots__ = ("tools", "next_page_token")
    TOOLS_FIELD_NUMBER: _ClassVar[int]
    NEXT_PAGE_TOKEN_FIELD_NUMBER: _ClassVar[int]
    tools: _containers.RepeatedCompositeFieldContainer[Tool]
    next_page_token: str
    def __init__(self, tools: _Optional[_Iterable[_Union[Tool, _Mapping]]] = ..., next_page_token: _Optional[str] = ...) -> None: ...

class Call(_message.Message):
    __slots__ = ("call_id", "tool_id", "run_id", "arguments_json", "effect_kind", "key", "request_id", "attempt", "state", "outcome", "outcome_detail", "created_at", "updated_at", "principal", "mode", "replay_of_run_id", "shadows_run_id", "replay_of_call_id", "replay_position")
    CALL_ID_FIELD_NUMBER: _ClassVar[int]
    TOOL_ID_FIELD_NUMBER: _ClassVar[int]
    RUN_ID_FIELD_NUMBER: _ClassVar[int]
    ARGUMENTS_JSON_FIELD_NUMBER: _ClassVar[int]
    EFFECT_KIND_FIELD_NUMBER: _ClassVar[int]
    KEY_FIELD_NUMBER: _ClassVar[int]
    REQUEST_ID_FIELD_NUMBER: _ClassVar[int]
    ATTEMPT_FIELD_NUMBER: _ClassVar[int]
    STATE_FIELD_NUMBER: _ClassVar[int]
    OUTCOME_FIELD_NUMBER: _ClassVar[int]
    OUTCOME_DETAIL_FIELD_NUMBER: _ClassVar[int]
    CREATED_AT_FIELD_NUMBER: _ClassVar[int]
    UPDATED_AT_FIELD_NUMBER: _ClassVar[int]
    PRINCIPAL_FIELD_NUMBER: _ClassVar[int]
    MODE_FIELD_NUMBER: _ClassVar[int]
    REPLAY_OF_RUN_ID_FIELD_NUMBER: _ClassVar[int]
    SHADOWS_RUN_ID_FIELD_NUMBER: _ClassVar[int]
    REPLAY_OF_CALL_ID_FIELD_NUMBER: _ClassVar[int]
    REPLAY_POSITION_FIELD_NUMBER: _ClassVar[int]
    call_id: str
    tool_id: str
    run_id: str
    arguments_json: str
    effect_kind: _effect_pb2.EffectKind
    key: str
    request_id: str
    attempt: int
    state: CallState
    outcome: CallOutcome
    outcome_detail: str
    created_at: _timestamp_pb2.Timestamp
    updated_at: _timestamp_pb2.Timestamp
    principal: str
    mode: RunMode
    replay_of_run_id: str
    shadows_run_id: str
    replay_of_call_id: str
    replay_position: int
    def __init__(self, call_id: _Optional[str] = ..., tool_id: _Optional[str] = ..., run_id: _Optional[str] = ..., arguments_json: _Optional[str] = ..., effect_kind: _Optional[_Union[_effect_pb2.EffectKind, str]] = ..., key: _Optional[str] = ..., request_id: _Optional[str] = ..., attempt: _Optional[int] = ..., state: _Optional[_Union[CallState, str]] = ..., outcome: _Optional[_Union[CallOutcome, str]] = ..., outcome_detail: _Optional[str] = ..., created_at: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ..., updated_at: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ..., principal: _Optional[str] = ..., mode: _Optional[_Union[RunMode, str]] = ..., replay_of_run_id: _Optional[str] = ..., shadows_run_id: _Optional[str] = ..., replay_of_call_id: _Optional[str] = ..., replay_position: _Optional[int] = ...) -> None: ...

class BeginCallRequest(_message.Message):
    __slots__ = ("tool_id", "call_id", "run_id", "arguments_json", "mode", "replay_of_run_id", "shadows_run_id")
    TOOL_ID_FIELD_NUMBER: _ClassVar[int]
    CALL_ID_FIELD_NUMBER: _ClassVar[int]
    RUN_ID_FIELD_NUMBER: _ClassVar[int]
    ARGUMENTS_JSON_FIELD_NUMBER: _ClassVar[int]
    MODE_FIELD_NUMBER: _ClassVar[int]
    REPLAY_OF_RUN_ID_FIELD_NUMBER: _ClassVar[int]
    SHADOWS_RUN_ID_FIELD_NUMBER: _ClassVar[int]
    tool_id: str
    call_id: str
    run_id: str
    arguments_json: str
    mode: RunMode
    replay_of_run_id: str
    shadows_run_id: str
    def __init__(self, tool_id: _Optional[str] = ..., call_id: _Optional[str] = ..., run_id: _Optional[str] = ..., arguments_json: _Optional[str] = ..., mode: _Optional[_Union[RunMode, str]] = ..., replay_of_run_id: _Optional[str] = ..., shadows_run_id: _Optional[str] = ...) -> None: ...

class BeginCallResponse(_message.Message):
    __slots__ = ("call", "capability", "capability_expires_at", "existing_call", "recorded_call")
    CALL_FIELD_NUMBER: _ClassVar[int]
    CAPABILITY_FIELD_NUMBER: _ClassVar[int]
    CAPABILITY_EXPIRES_AT_FIELD_NUMBER: _ClassVar[int]
    EXISTING_CALL_FIELD_NUMBER: _ClassVar[int]
    RECORDED_CALL_FIELD_NUMBER: _ClassVar[int]
    call: Call
    capability: str
    capability_expires_at: _timestamp_pb2.Timestamp
    existing_call: bool
    recorded_call: Call
    def __init__(self, call: _Optional[_Union[Call, _Mapping]] = ..., capability: _Optional[str] = ..., capability_expires_at: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ..., existing_call: _Optional[bool] = ..., recorded_call: _Optional[_Union[Call, _Mapping]] = ...) -> None: ...

class CompleteCallRequest(_message.Message):
    __slots__ = ("call_id", "outcome", "outcome_detail")
    CALL_ID_FIELD_NUMBER: _ClassVar[int]
    OUTCOME_FIELD_NUMBER: _ClassVar[int]
    OUTCOME_DETAIL_FIELD_NUMBER: _ClassVar[int]
    call_id: str
    outcome: CallOutcome
    outcome_detail: str
    def __init__(self, call_id: _Optional[str] = ..., outcome: _Optional[_Union[CallOutcome, str]] = ..., outcome_detail: _Optional[str] = ...) -> None: ...

class CompleteCallResponse(_message.Message):
    __slots__ = ("call", "already_completed")
    CALL_FIELD_NUMBER: _ClassVar[int]
    ALREADY_COMPLETED_FIELD_NUMBER: _ClassVar[int]
    call: Call
    already_completed: bool
    def __init__(self, call: _Optional[_Union[Call, _Mapping]] = ..., already_completed: _Optional[bool] = ...) -> None: ...

class BeginCallsRequest(_message.Message):
    __slots__ = ("calls", "receipts")
    CALLS_FIELD_NUMBER: _ClassVar[int]
    RECEIPTS_FIELD_NUMBER: _ClassVar[int]
    calls: _containers.RepeatedCompositeFieldContainer[BeginCallRequest]
    receipts: _containers.RepeatedCompositeFieldContainer[_effect_pb2.CompletionReceipt]
    def __init__(self, calls: _Optional[_Iterable[_Union[BeginCallRequest, _Mapping]]] = ..., receipts: _Optional[_Iterable[_Union[_effect_pb2.CompletionReceipt, _Mapping]]] = ...) -> None: ...

class BeginCallsResponse(_message.Message):
    __slots__ = ("results",)
    RESULTS_FIELD_NUMBER: _ClassVar[int]
    results: _containers.RepeatedCompositeFieldContainer[BeginCallResult]
    def __init__(self, results: _Optional[_Iterable[_Union[BeginCallResult, _Mapping]]] = ...) -> None: ...

class BeginCallResult(_message.Message):
    __slots__ = ("begun", "error_status")
    BEGUN_FIELD_NUMBER: _ClassVar[int]
    ERROR_STATUS_FIELD_NUMBER: _ClassVar[int]
    begun: BeginCallResponse
    error_status: bytes
    def __init__(self, begun: _Optional[_Union[BeginCallResponse, _Mapping]] = ..., error_status: _Optional[bytes] = ...) -> None: ...

class CompleteCallsRequest(_message.Message):
    __slots__ = ("calls",)
    CALLS_FIELD_NUMBER: _ClassVar[int]
    calls: _containers.RepeatedCompositeFieldContainer[CompleteCallRequest]
    def __init__(self, calls: _Optional[_Iterable[_Union[CompleteCallRequest, _Mapping]]] = ...) -> None: ...

class CompleteCallsResponse(_message.Message):
    __slots__ = ("results",)
    RESULTS_FIELD_NUMBER: _ClassVar[int]
    results: _containers.RepeatedCompositeFieldContainer[CompleteCallResult]
    def __init__(self, results: _Optional[_Iterable[_Union[CompleteCallResult, _Mapping]]] = ...) -> None: ...

class CompleteCallResult(_message.Message):
    __slots__ = ("completed", "error_status")
    COMPLETED_FIELD_NUMBER: _ClassVar[int]
    ERROR_STATUS_FIELD_NUMBER: _ClassVar[int]
    completed: CompleteCallResponse
    error_status: bytes
    def __init__(self, completed: _Optional[_Union[CompleteCallResponse, _Mapping]] = ..., error_status: _Optional[bytes] = ...) -> None: ...

class ListPendingCallsRequest(_message.Message):
    __slots__ = ("tool_id", "page_size", "page_token")
    TOOL_ID_FIELD_NUMBER: _ClassVar[int]
    PAGE_SIZE_FIELD_NUMBER: _ClassVar[int]
    PAGE_TOKEN_FIELD_NUMBER: _ClassVar[int]
    tool_id: str
    page_size: int
    page_token: str
    def __init__(self, tool_id: _Optional[str] = ..., page_size: _Optional[int] = ..., page_token: _Optional[str] = ...) -> None: ...

class ListPendingCallsResponse(_message.Message):
    __slots__ = ("calls", "next_page_token")
    CALLS_FIELD_NUMBER: _ClassVar[int]
    NEXT_PAGE_TOKEN_FIELD_NUMBER: _ClassVar[int]
    calls: _containers.RepeatedCompositeFieldContainer[Call]
    next_page_token: str
    def __init__(self, calls: _Optional[_Iterable[_Union[Call, _Mapping]]] = ..., next_page_token: _Optional[str] = ...) -> None: ...

class ListIndeterminateCallsRequest(_message.Message):
    __slots__ = ("tool_id", "page_size", "page_token")
    TOOL_ID_FIELD_NUMBER: _ClassVar[int]
    PAGE_SIZE_FIELD_NUMBER: _ClassVar[int]
    PAGE_TOKEN_FIELD_NUMBER: _ClassVar[int]
    tool_id: str
    page_size: int
    page_token: str
    def __init__(self, tool_id: _Optional[str] = ..., page_size: _Optional[int] = ..., page_token: _Optional[str] = ...) -> None: ...

class ListIndeterminateCallsResponse(_message.Message):
    __slots__ = ("calls", "next_page_token")
    CALLS_FIELD_NUMBER: _ClassVar[int]
    NEXT_PAGE_TOKEN_FIELD_NUMBER: _ClassVar[int]
    calls: _containers.RepeatedCompositeFieldContainer[Call]
    next_page_token: str
    def __init__(self, calls: _Optional[_Iterable[_Union[Call, _Mapping]]] = ..., next_page_token: _Optional[str] = ...) -> None: ...

class ResumeCallRequest(_message.Message):
    __slots__ = ("call_id", "lookup_only")
    CALL_ID_FIELD_NUMBER: _ClassVar[int]
    LOOKUP_ONLY_FIELD_NUMBER: _ClassVar[int]
    call_id: str
    lookup_only: bool
    def __init__(self, call_id: _Optional[str] = ..., lookup_only: _Optional[bool] = ...) -> None: ...

class ResumeCallResponse(_message.Message):
    __slots__ = ("call", "action", "capability", "capability_expires_at")
    CALL_FIELD_NUMBER: _ClassVar[int]
    ACTION_FIELD_NUMBER: _ClassVar[int]
    CAPABILITY_FIELD_NUMBER: _ClassVar[int]
    CAPABILITY_EXPIRES_AT_FIELD_NUMBER: _ClassVar[int]
    call: Call
    action: ResumeAction
    capability: str
    capability_expires_at: _timestamp_pb2.Timestamp
    def __init__(self, call: _Optional[_Union[Call, _Mapping]] = ..., action: _Optional[_Union[ResumeAction, str]] = ..., capability: _Optional[str] = ..., capability_expires_at: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ...) -> None: ...

class GetSigningKeysRequest(_message.Message):
    __slots__ = ()
    def __init__(self) -> None: ...

class GetSigningKeysResponse(_message.Message):
    __slots__ = ("jwks_json", "current_key_id")
    JWKS_JSON_FIELD_NUMBER: _ClassVar[int]
    CURRENT_KEY_ID_FIELD_NUMBER: _ClassVar[int]
    jwks_json: str
    current_key_id: str
    def __init__(self, jwks_json: _Optional[str] = ..., current_key_id: _Optional[str] = ...) -> None: ...

class ListRunCallsRequest(_message.Message):
    __slots__ = ("run_id", "page_size", "page_token")
    RUN_ID_FIELD_NUMBER: _ClassVar[int]
    PAGE_SIZE_FIELD_NUMBER: _ClassVar[int]
    PAGE_TOKEN_FIELD_NUMBER: _ClassVar[int]
    run_id: str
    page_size: int
    page_token: str
    def __init__(self, run_id: _Optional[str] = ..., page_size: _Optional[int] = ..., page_token: _Optional[str] = ...) -> None: ...

class ListRunCallsResponse(_message.Message):
    __slots__ = ("calls", "next_page_token")
    CALLS_FIELD_NUMBER: _ClassVar[int]
    NEXT_PAGE_TOKEN_FIELD_NUMBER: _ClassVar[int]
    calls: _containers.RepeatedCompositeFieldContainer[RunCall]
    next_page_token: str
    def __init__(self, calls: _Optional[_Iterable[_Union[RunCall, _Mapping]]] = ..., next_page_token: _Optional[str] = ...) -> None: ...

class RunCall(_message.Message):
    __slots__ = ("position", "call")
    POSITION_FIELD_NUMBER: _ClassVar[int]
    CALL_FIELD_NUMBER: _ClassVar[int]
    position: int
    call: Call
    def __init__(self, position: _Optional[int] = ..., call: _Optional[_Union[Call, _Mapping]] = ...) -> None: ...

class GetCallRequest(_message.Message):
    __slots__ = ("call_id",)
    CALL_ID_FIELD_NUMBER: _ClassVar[int]
    call_id: str
    def __init__(self, call_id: _Optional[str] = ...) -> None: ...

class GetCallResponse(_message.Message):
    __slots__ = ("call", "settlement", "capability", "resumes")
    CALL_FIELD_NUMBER: _ClassVar[int]
    SETTLEMENT_FIELD_NUMBER: _ClassVar[int]
    CAPABILITY_FIELD_NUMBER: _ClassVar[int]
    RESUMES_FIELD_NUMBER: _ClassVar[int]
    call: Call
    settlement: CallSettlement
    capability: CallCapability
    resumes: _containers.RepeatedCompositeFieldContainer[CallResume]
    def __init__(self, call: _Optional[_Union[Call, _Mapping]] = ..., settlement: _Optional[_Union[CallSettlement, _Mapping]] = ..., capability: _Optional[_Union[CallCapability, _Mapping]] = ..., resumes: _Optional[_Iterable[_Union[CallResume, _Mapping]]] = ...) -> None: ...

class CallResume(_message.Message):
    __slots__ = ("attempt", "capability_id", "at", "by")
    ATTEMPT_FIELD_NUMBER: _ClassVar[int]
    CAPABILITY_ID_FIELD_NUMBER: _ClassVar[int]
    AT_FIELD_NUMBER: _ClassVar[int]
    BY_FIELD_NUMBER: _ClassVar[int]
    attempt: int
    capability_id: str
    at: _timestamp_pb2.Timestamp
    by: str
    def __init__(self, attempt: _Optional[int] = ..., capability_id: _Optional[str] = ..., at: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ..., by: _Optional[str] = ...) -> None: ...

class CallSettlement(_message.Message):
    __slots__ = ("completed_at", "completed_by", "recovery_refused_at", "recovery_refused_reason", "recovery_refused_message", "recovery_refused_by")
    COMPLETED_AT_FIELD_NUMBER: _ClassVar[int]
    COMPLETED_BY_FIELD_NUMBER: _ClassVar[int]
    RECOVERY_REFUSED_AT_FIELD_NUMBER: _ClassVar[int]
    RECOVERY_REFUSED_REASON_FIELD_NUMBER: _ClassVar[int]
    RECOVERY_REFUSED_MESSAGE_FIELD_NUMBER: _ClassVar[int]
    RECOVERY_REFUSED_BY_FIELD_NUMBER: _ClassVar[int]
    completed_at: _timestamp_pb2.Timestamp
    completed_by: str
    recovery_refused_at: _timestamp_pb2.Timestamp
    recovery_refused_reason: str
    recovery_refused_message: str
    recovery_refused_by: str
    def __init__(self, completed_at: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ..., completed_by: _Optional[str] = ..., recovery_refused_at: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ..., recovery_refused_reason: _Optional[str] = ..., recovery_refused_message: _Optional[str] = ..., recovery_refused_by: _Optional[str] = ...) -> None: ...

class CallCapability(_message.Message):
    __slots__ = ("capability_id", "attempt", "issued_at", "expires_at")
    CAPABILITY_ID_FIELD_NUMBER: _ClassVar[int]
    ATTEMPT_FIELD_NUMBER: _ClassVar[int]
    ISSUED_AT_FIELD_NUMBER: _ClassVar[int]
    EXPIRES_AT_FIELD_NUMBER: _ClassVar[int]
    capability_id: str
    attempt: int
    issued_at: _timestamp_pb2.Timestamp
    expires_at: _timestamp_pb2.Timestamp
    def __init__(self, capability_id: _Optional[str] = ..., attempt: _Optional[int] = ..., issued_at: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ..., expires_at: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ...) -> None: ...

class SearchCallsRequest(_message.Message):
    __slots__ = ("call_id", "run_id", "key", "principal", "page_size", "page_token")
    CALL_ID_FIELD_NUMBER: _ClassVar[int]
    RUN_ID_FIELD_NUMBER: _ClassVar[int]
    KEY_FIELD_NUMBER: _ClassVar[int]
    PRINCIPAL_FIELD_NUMBER: _ClassVar[int]
    PAGE_SIZE_FIELD_NUMBER: _ClassVar[int]
    PAGE_TOKEN_FIELD_NUMBER: _ClassVar[int]
    call_id: str
    run_id: str
    key: str
    principal: str
    page_size: int
    page_token: str
    def __init__(self, call_id: _Optional[str] = ..., run_id: _Optional[str] = ..., key: _Optional[str] = ..., principal: _Optional[str] = ..., page_size: _Optional[int] = ..., page_token: _Optional[str] = ...) -> None: ...

class SearchCallsResponse(_message.Message):
    __slots__ = ("calls", "next_page_token")
    CALLS_FIELD_NUMBER: _ClassVar[int]
    NEXT_PAGE_TOKEN_FIELD_NUMBER: _ClassVar[int]
    calls: _containers.RepeatedCompositeFieldContainer[Call]
    next_page_token: str
    def __init__(self, calls: _Optional[_Iterable[_Union[Call, _Mapping]]] = ..., next_page_token: _Optional[str] = ...) -> None: ...
