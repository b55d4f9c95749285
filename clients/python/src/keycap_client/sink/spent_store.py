"""Single use of unsafe and queryable capabilities at a sink (ADR 0013 §6).

The sink spends a capability's ``jti`` before its handler runs; the store's answer
decides, so two presentations racing each other cannot both run the effect.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime, timezone
from typing import Any, Protocol

from pymongo.collection import Collection
from pymongo.database import Database
from pymongo.errors import DuplicateKeyError, PyMongoError

from keycap_client import reasons
from keycap_client.sink.refusal import SinkRefusal

__all__ = ["SpentCapability", "SpentStore", "InMemorySpentStore", "MongoSpentStore", "SPENT_COLLECTION"]

#: The collection of :class:`MongoSpentStore`.
SPENT_COLLECTION = "spent_capabilities"


@dataclass(frozen=True)
class SpentCapability:
    """One capability being spent; after ``expires_at`` it is refused as expired anyway."""

    sink: str
    jti: str
    tool_id: str
    call_id: str
    effect: str
    expires_at: datetime


class SpentStore(Protocol):
    """Where a sink remembers spent capabilities."""

    def spend(self, c: SpentCapability) -> bool:
        """True the first time a capability is spent, False every later time.

        Raises SinkRefusal DATABASE_UNAVAILABLE when the store cannot tell."""
        ...

    def close(self) -> None: ...


class InMemorySpentStore:
    """One process's memory: for tests and single-replica sinks."""

    def __init__(self, clock: Callable[[], float] = time.time) -> None:
        self._spent: dict[str, float] = {}
        self._lock = threading.Lock()
        self._clock = clock

    def spend(self, c: SpentCapability) -> bool:
        t = self._clock()
        sid = f"{c.sink}/{c.jti}"
        with self._lock:
            # Forgetting expired ids on the way keeps the map bounded by live capabilities.
            if len(self._spent) > 1024:
                self._spent = {k: exp for k, exp in self._spent.items() if exp >= t}
            if sid in self._spent:
                return False
            self._spent[sid] = c.expires_at.timestamp()
            return True

    def close(self) -> None:
        pass


class MongoSpentStore:
    """Spent capabilities in MongoDB (collection ``spent_capabilities``), shared by every
    replica of a sink. The insert of ``_id: "<sink>/<jti>"`` decides first use; expired
    records are deleted by a periodic sweep (FerretDB has no TTL indexes).

    Example::

        db = pymongo.MongoClient(uri, serverSelectionTimeoutMS=2000)["keycap"]
        spent = MongoSpentStore(db)
    """

    def __init__(
        self,
        db: Database[Any],
        *,
        sweep_interval: float = 60.0,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self._coll: Collection[Any] = db[SPENT_COLLECTION]
        self._clock = clock
        self._coll.create_index([("expires_at", 1)], name="expires_at")
        self._stop = threading.Event()
        self._sweeper: threading.Thread | None = None
        if sweep_interval > 0:
            self._sweeper = threading.Thread(
                target=self._sweep_loop, args=(sweep_interval,), name="keycap-spent-sweep", daemon=True
            )
            self._sweeper.start()

    def spend(self, c: SpentCapability) -> bool:
        try:
            res = self._coll.insert_one(
                {
                    "_id": f"{c.sink}/{c.jti}",
                    "sink": c.sink,
                    "jti": c.jti,
                    "tool_id": c.tool_id,
                    "call_id": c.call_id,
                    "effect": c.effect,
                    "spent_at": datetime.fromtimestamp(self._clock(), timezone.utc),
                    "expires_at": c.expires_at,
                }
            )
        except DuplicateKeyError:
            return False
        except PyMongoError as err:
            # Any other failure leaves first use undecided: refuse, retryably, and run nothing.
            raise SinkRefusal(
                reasons.DATABASE_UNAVAILABLE, f"the spent-capability store failed ({type(err).__name__}); retry"
            ) from err
        if not res.acknowledged:
            raise SinkRefusal(reasons.DATABASE_UNAVAILABLE, "the spent-capability insert was not acknowledged; retry")
        return True

    def sweep(self) -> int:
        """Deletes records of capabilities past their expiry; returns how many."""
        now = datetime.fromtimestamp(self._clock(), timezone.utc)
        return self._coll.delete_many({"expires_at": {"$lt": now}}).deleted_count

    def close(self) -> None:
        """Stops the sweep (the database client is the caller's to close)."""
        self._stop.set()
        if self._sweeper is not None:
            self._sweeper.join(timeout=5)

    def _sweep_loop(self, every: float) -> None:
        while not self._stop.wait(every):
            try:
                self.sweep()
            except PyMongoError:
                pass  # the next sweep tries again; expired records only cost space
