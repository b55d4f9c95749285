from keycap_client._gen.keycap.rules.v1 import refusal_pb2 as _refusal_pb2
from google.protobuf.internal import containers as _containers
from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from collections.abc import Iterable as _Iterable
from typing import ClassVar as _ClassVar, Optional as _Optional

DESCRIPTOR: _descriptor.FileDescriptor

class HttpDestination(_message.Message):
    __slots__ = ("base_url", "methods", "response_headers", "idempotency_header", "allow_private_network")
    BASE_URL_FIELD_NUMBER: _ClassVar[int]
    METHODS_FIELD_NUMBER: _ClassVar[int]
    RESPONSE_HEADERS_FIELD_NUMBER: _ClassVar[int]
    IDEMPOTENCY_HEADER_FIELD_NUMBER: _ClassVar[int]
    ALLOW_PRIVATE_NETWORK_FIELD_NUMBER: _ClassVar[int]
    base_url: str
    methods: _containers.RepeatedScalarFieldContainer[str]
    response_headers: _containers.RepeatedScalarFieldContainer[str]
    idempotency_header: str
    allow_private_network: bool
    def __init__(self, base_url: _Optional[str] = ..., methods: _Optional[_Iterable[str]] = ..., response_headers: _Optional[_Iterable[str]] = ..., idempotency_header: _Optional[str] = ..., allow_private_network: _Optional[bool] = ...) -> None: ...
