"""The client core: everything a keycap client does except waiting for the network.

The sync clients (:mod:`keycap_client`) and their asyncio twins (:mod:`keycap_client.aio`)
are thin adapters over this package; each of their methods is one line that hands a
*flow* from here to its runtime, which blocks (``_rpc``) or awaits (``aio._rpc``). So the
two cannot drift apart:

- :mod:`~keycap_client._core.call`: the call policy, transport-free: the request's rules
  checked before sending, the bearer and trace metadata, the deadline, which failure is
  retried and after how long (:class:`Attempts`), and :data:`Flow`, an operation written
  as a generator that yields the :class:`Rpc` s it needs and returns its result;
- :mod:`~keycap_client._core.wire`: requests built from a method's arguments;
- :mod:`~keycap_client._core.kernel`, ``ledger``, ``admin``, ``access``: each service's
  operations as flows (requests, paging, response mapping);
- :mod:`~keycap_client._core.handle`: what a capability handle holds, sync or asyncio.

Nothing here imports a channel, sleeps or awaits.
"""
