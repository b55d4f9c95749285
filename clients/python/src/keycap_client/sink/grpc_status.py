"""A sink refusal as the ledger sends it over gRPC: the reason's code, the message, and a
binary ``google.rpc.Status`` with ``ErrorInfo{reason, domain: "keycap.dev"}`` (plus
``RetryInfo`` when UNAVAILABLE) in the ``grpc-status-details-bin`` trailer."""

from __future__ import annotations

from functools import cache
from importlib import resources
from typing import Any

from google.protobuf import descriptor_pb2, descriptor_pool, message_factory

from keycap_client.errors import ERROR_DOMAIN, STATUS_DETAILS_KEY
from keycap_client.sink.refusal import SinkRefusal

__all__ = ["status_details", "STATUS_DETAILS_KEY"]

_TYPE_PREFIX = "type.googleapis.com/"


@cache
def _types() -> tuple[Any, Any, Any]:
    # A private pool, as in keycap_client.errors: coexists with googleapis-common-protos.
    raw = resources.files("keycap_client._gen").joinpath("google_rpc.binpb").read_bytes()
    pool = descriptor_pool.DescriptorPool()
    for file in descriptor_pb2.FileDescriptorSet.FromString(raw).file:
        pool.AddSerializedFile(file.SerializeToString())

    def cls(name: str) -> Any:
        return message_factory.GetMessageClass(pool.FindMessageTypeByName(name))

    return cls("google.rpc.Status"), cls("google.rpc.ErrorInfo"), cls("google.rpc.RetryInfo")


def status_details(err: SinkRefusal) -> bytes:
    """The serialized google.rpc.Status of ``err`` (the trailer's value)."""
    status_t, info_t, retry_t = _types()
    st: Any = status_t(code=err.code.value[0], message=err.message)
    info: Any = info_t(reason=err.reason, domain=ERROR_DOMAIN)
    for k, v in err.metadata.items():
        info.metadata[k] = v
    st.details.add(type_url=_TYPE_PREFIX + "google.rpc.ErrorInfo", value=info.SerializeToString())
    if err.retryable:
        retry: Any = retry_t()
        retry.retry_delay.nanos = 500_000_000  # what the services recommend, too
        st.details.add(type_url=_TYPE_PREFIX + "google.rpc.RetryInfo", value=retry.SerializeToString())
    data: bytes = st.SerializeToString()
    return data
