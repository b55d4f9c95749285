"""keycap's Python client on asyncio (``grpc.aio``).

The twins of the sync clients, with the same constructors (address, ``token`` and the
default runtime credential lookup, ``tls``/``credentials``, ``timeout``) and the same
method names and arguments, awaited: :class:`AsyncKernelClient` (whose ``begin`` returns an
:class:`AsyncCapabilityHandle`), :class:`AsyncLedgerClient`, :class:`AsyncAdminClient`,
:class:`AsyncAccessClient`. The same call policy too: wait-for-ready, UNAVAILABLE retried
with jittered backoff (``asyncio.sleep``) within the deadline, never a single-use
capability's write. Use them with ``async with`` or ``await client.close()``, and make them
inside the running event loop (their channels belong to it). Tool definitions, TLS options
and :class:`~keycap_client.KeycapError` come from :mod:`keycap_client`.

Example::

    async with AsyncKernelClient("127.0.0.1:50051", ledger_address="127.0.0.1:50052") as kernel:
        handle = await kernel.begin("payments.charge", {"order_id": "o-1", "amount": 500})
        await handle.write(b'{"charged": 500}')
        await handle.complete()
"""

from keycap_client.aio.access_client import AsyncAccessClient
from keycap_client.aio.admin_client import AsyncAdminClient
from keycap_client.aio.capability_handle import AsyncCapabilityHandle
from keycap_client.aio.kernel_client import AsyncKernelClient
from keycap_client.aio.ledger_client import AsyncLedgerClient

__all__ = [
    "AsyncAccessClient",
    "AsyncAdminClient",
    "AsyncCapabilityHandle",
    "AsyncKernelClient",
    "AsyncLedgerClient",
]
