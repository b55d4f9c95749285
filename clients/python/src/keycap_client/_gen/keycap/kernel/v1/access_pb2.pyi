import datetime

from google.protobuf import timestamp_pb2 as _timestamp_pb2
from google.protobuf.internal import containers as _containers
from google.protobuf.internal import enum_type_wrapper as _enum_type_wrapper
from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from collections.abc import Iterable as _Iterable, Mapping as _Mapping
from typing import ClassVar as _ClassVar, Optional as _Optional, Union as _Union

DESCRIPTOR: _descriptor.FileDescriptor

class PrincipalRole(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    PRINCIPAL_ROLE_UNSPECIFIED: _ClassVar[PrincipalRole]
    PRINCIPAL_ROLE_RUNTIME: _ClassVar[PrincipalRole]
    PRINCIPAL_ROLE_OPERATOR: _ClassVar[PrincipalRole]

class AuthMethod(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    AUTH_METHOD_UNSPECIFIED: _ClassVar[AuthMethod]
    AUTH_METHOD_BEARER: _ClassVar[AuthMethod]
    AUTH_METHOD_MTLS: _ClassVar[AuthMethod]
    AUTH_METHOD_ADMIN_CREDENTIAL: _ClassVar[AuthMethod]
PRINCIPAL_ROLE_UNSPECIFIED: PrincipalRole
PRINCIPAL_ROLE_RUNTIME: PrincipalRole
PRINCIPAL_ROLE_OPERATOR: PrincipalRole
AUTH_METHOD_UNSPECIFIED: AuthMethod
AUTH_METHOD_BEARER: AuthMethod
AUTH_METHOD_MTLS: AuthMethod
AUTH_METHOD_ADMIN_CREDENTIAL: AuthMethod

class Principal(_message.Message):
    __slots__ = ("name", "role", "created_at", "created_by", "revoked_at", "revoked_by")
    NAME_FIELD_NUMBER: _ClassVar[int]
    ROLE_FIELD_NUMBER: _ClassVar[int]
    CREATED_AT_FIELD_NUMBER: _ClassVar[int]
    CREATED_BY_FIELD_NUMBER: _ClassVar[int]
    REVOKED_AT_FIELD_NUMBER: _ClassVar[int]
    REVOKED_BY_FIELD_NUMBER: _ClassVar[int]
    name: str
    role: PrincipalRole
    created_at: _timestamp_pb2.Timestamp
    created_by: str
    revoked_at: _timestamp_pb2.Timestamp
    revoked_by: str
    def __init__(self, name: _Optional[str] = ..., role: _Optional[_Union[PrincipalRole, str]] = ..., created_at: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ..., created_by: _Optional[str] = ..., revoked_at: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ..., revoked_by: _Optional[str] = ...) -> None: ...

class CreatePrincipalRequest(_message.Message):
    __slots__ = ("name", "role")
    NAME_FIELD_NUMBER: _ClassVar[int]
    ROLE_FIELD_NUMBER: _ClassVar[int]
    name: str
    role: PrincipalRole
    def __init__(self, name: _Optional[str] = ..., role: _Optional[_Union[PrincipalRole, str]] = ...) -> None: ...

class CreatePrincipalResponse(_message.Message):
    __slots__ = ("principal", "secret")
    PRINCIPAL_FIELD_NUMBER: _ClassVar[int]
    SECRET_FIELD_NUMBER: _ClassVar[int]
    principal: Principal
    secret: str
    def __init__(self, principal: _Optional[_Union[Principal, _Mapping]] = ..., secret: _Optional[str] = ...) -> None: ...

class ListPrincipalsRequest(_message.Message):
    __slots__ = ("page_size", "page_token")
    PAGE_SIZE_FIELD_NUMBER: _ClassVar[int]
    PAGE_TOKEN_FIELD_NUMBER: _ClassVar[int]
    page_size: int
    page_token: str
    def __init__(self, page_size: _Optional[int] = ..., page_token: _Optional[str] = ...) -> None: ...

class ListPrincipalsResponse(_message.Message):
    __slots__ = ("principals", "next_page_token")
    PRINCIPALS_FIELD_NUMBER: _ClassVar[int]
    NEXT_PAGE_TOKEN_FIELD_NUMBER: _ClassVar[int]
    principals: _containers.RepeatedCompositeFieldContainer[Principal]
    next_page_token: str
    def __init__(self, principals: _Optional[_Iterable[_Union[Principal, _Mapping]]] = ..., next_page_token: _Optional[str] = ...) -> None: ...

class RevokePrincipalRequest(_message.Message):
    __slots__ = ("name",)
    NAME_FIELD_NUMBER: _ClassVar[int]
    name: str
    def __init__(self, name: _Optional[str] = ...) -> None: ...

class RevokePrincipalResponse(_message.Message):
    __slots__ = ("principal", "already_revoked")
    PRINCIPAL_FIELD_NUMBER: _ClassVar[int]
    ALREADY_REVOKED_FIELD_NUMBER: _ClassVar[int]
    principal: Principal
    already_revoked: bool
    def __init__(self, principal: _Optional[_Union[Principal, _Mapping]] = ..., already_revoked: _Optional[bool] = ...) -> None: ...

class Grant(_message.Message):
    __slots__ = ("tool_id", "principal", "granted_at", "granted_by")
    TOOL_ID_FIELD_NUMBER: _ClassVar[int]
    PRINCIPAL_FIELD_NUMBER: _ClassVar[int]
    GRANTED_AT_FIELD_NUMBER: _ClassVar[int]
    GRANTED_BY_FIELD_NUMBER: _ClassVar[int]
    tool_id: str
    principal: str
    granted_at: _timestamp_pb2.Timestamp
    granted_by: str
    def __init__(self, tool_id: _Optional[str] = ..., principal: _Optional[str] = ..., granted_at: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ..., granted_by: _Optional[str] = ...) -> None: ...

class AddGrantRequest(_message.Message):
    __slots__ = ("tool_id", "principal")
    TOOL_ID_FIELD_NUMBER: _ClassVar[int]
    PRINCIPAL_FIELD_NUMBER: _ClassVar[int]
    tool_id: str
    principal: str
    def __init__(self, tool_id: _Optional[str] = ..., principal: _Optional[str] = ...) -> None: ...

class AddGrantResponse(_message.Message):
    __slots__ = ("grant", "already_granted")
    GRANT_FIELD_NUMBER: _ClassVar[int]
    ALREADY_GRANTED_FIELD_NUMBER: _ClassVar[int]
    grant: Grant
    already_granted: bool
    def __init__(self, grant: _Optional[_Union[Grant, _Mapping]] = ..., already_granted: _Optional[bool] = ...) -> None: ...

class RemoveGrantRequest(_message.Message):
    __slots__ = ("tool_id", "principal")
    TOOL_ID_FIELD_NUMBER: _ClassVar[int]
    PRINCIPAL_FIELD_NUMBER: _ClassVar[int]
    tool_id: str
    principal: str
    def __init__(self, tool_id: _Optional[str] = ..., principal: _Optional[str] = ...) -> None: ...

class RemoveGrantResponse(_message.Message):
    __slots__ = ("removed",)
    REMOVED_FIELD_NUMBER: _ClassVar[int]
    removed: bool
    def __init__(self, removed: _Optional[bool] = ...) -> None: ...

class ListGrantsRequest(_message.Message):
    __slots__ = ("tool_id", "principal", "page_size", "page_token")
    TOOL_ID_FIELD_NUMBER: _ClassVar[int]
    PRINCIPAL_FIELD_NUMBER: _ClassVar[int]
    PAGE_SIZE_FIELD_NUMBER: _ClassVar[int]
    PAGE_TOKEN_FIELD_NUMBER: _ClassVar[int]
    tool_id: str
    principal: str
    page_size: int
    page_token: str
    def __init__(self, tool_id: _Optional[str] = ..., principal: _Optional[str] = ..., page_size: _Optional[int] = ..., page_token: _Optional[str] = ...) -> None: ...

class ListGrantsResponse(_message.Message):
    __slots__ = ("grants", "next_page_token")
    GRANTS_FIELD_NUMBER: _ClassVar[int]
    NEXT_PAGE_TOKEN_FIELD_NUMBER: _ClassVar[int]
    grants: _containers.RepeatedCompositeFieldContainer[Grant]
    next_page_token: str
    def __init__(self, grants: _Optional[_Iterable[_Union[Grant, _Mapping]]] = ..., next_page_token: _Optional[str] = ...) -> None: ...

class WhoAmIRequest(_message.Message):
    __slots__ = ()
    def __init__(self) -> None: ...

class WhoAmIResponse(_message.Message):
    __slots__ = ("principal", "role", "auth_method", "certificate_identity")
    PRINCIPAL_FIELD_NUMBER: _ClassVar[int]
    ROLE_FIELD_NUMBER: _ClassVar[int]
    AUTH_METHOD_FIELD_NUMBER: _ClassVar[int]
    CERTIFICATE_IDENTITY_FIELD_NUMBER: _ClassVar[int]
    principal: str
    role: PrincipalRole
    auth_method: AuthMethod
    certificate_identity: str
    def __init__(self, principal: _Optional[str] = ..., role: _Optional[_Union[PrincipalRole, str]] = ..., auth_method: _Optional[_Union[AuthMethod, str]] = ..., certificate_identity: _Optional[str] = ...) -> None: ...
