"""keycap's sink SDK: make any Python service an enforcing sink (ADR 0013).

A :class:`Sink` admits a request only under a genuine capability for one of its tools,
refusing exactly what the ledger refuses, for the same reason: offline verification
against the kernel's keys (:class:`KernelJwksSource` or :class:`StaticJwksSource`), the
tool allow-list, the request's idempotency key against the capability's, and single use
of unsafe and queryable capabilities (:class:`InMemorySpentStore`,
:class:`MongoSpentStore`). Refusals are recorded in keycap's ``rejections`` under
``sink:<name>`` (:class:`MongoRefusalRecorder`), so ``keycap rejections`` lists them.
Transports: :class:`SinkInterceptor` (grpc), :class:`AsyncSinkInterceptor` (grpc.aio),
:class:`SinkMiddleware` (ASGI). Needs the ``sink`` extra (cryptography, pymongo).
"""

from keycap_client.sink._current import current_capability
from keycap_client.sink.asgi import SinkMiddleware, capability_from_scope, problem_json
from keycap_client.sink.claims import DerivationClaim, Effect, SandboxMode, VerifiedCapability
from keycap_client.sink.grpc_interceptor import AsyncSinkInterceptor, SinkInterceptor, capability_of
from keycap_client.sink.keys import JwksError, KernelJwksSource, PublicKeySource, StaticJwksSource, parse_jwks
from keycap_client.sink.refusal import REASON_CODES, SinkRefusal, UnverifiedInfo
from keycap_client.sink.refusal_recorder import MongoRefusalRecorder, RefusalRecorder, RejectionInput
from keycap_client.sink.sink import AdmissionContext, Sink, SinkRefusalEvent, sink_service
from keycap_client.sink.spent_store import InMemorySpentStore, MongoSpentStore, SpentCapability, SpentStore
from keycap_client.sink.verifier import CapabilityVerifier, VerifierOptions, parse_bearer

__all__ = [
    "AdmissionContext",
    "AsyncSinkInterceptor",
    "CapabilityVerifier",
    "DerivationClaim",
    "Effect",
    "SandboxMode",
    "InMemorySpentStore",
    "JwksError",
    "KernelJwksSource",
    "MongoRefusalRecorder",
    "MongoSpentStore",
    "PublicKeySource",
    "REASON_CODES",
    "RefusalRecorder",
    "RejectionInput",
    "Sink",
    "SinkInterceptor",
    "SinkMiddleware",
    "SinkRefusal",
    "SinkRefusalEvent",
    "SpentCapability",
    "SpentStore",
    "StaticJwksSource",
    "UnverifiedInfo",
    "VerifiedCapability",
    "VerifierOptions",
    "capability_from_scope",
    "capability_of",
    "current_capability",
    "parse_bearer",
    "parse_jwks",
    "problem_json",
    "sink_service",
]
