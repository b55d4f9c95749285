"""A sink's refusals in keycap's ``rejections`` collection, with the ledger's record shape
(services/common/src/rejection-audit.ts), under ``service: "sink:<name>"`` (ADR 0013 §7).

Unverified callers cannot flood the store: their records are rate limited per peer IP
(token bucket, default 60 a minute); past the limit, and for availability refusals
(SIGNING_KEYS_UNAVAILABLE, DATABASE_UNAVAILABLE), refusals are counted in memory and
upserted about once a second as one summary per peer and minute. Recording never raises.
Nothing here ever sees the raw capability.

Recorded refusals are also counted, by reason and tool, in one ``stats_counters`` document
this recorder alone writes (its running totals, about once a second), so GetStats sums
counters instead of reading ``rejections`` (services/common/src/stats-counters.ts, ADR 0025).

Every record carries ``lb``, the UTC second of its ``rejected_at``, and before it is written its
time buckets are marked in ``listing_marks`` (once per process and bucket, duplicates ignored),
so the ledger's admin listings, which walk those buckets, find it (ADR 0033; the format is
keycap_client.sink.time_buckets).
"""

from __future__ import annotations

import json
import logging
import re
import threading
import os
import time
import uuid
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from datetime import datetime, timezone
from typing import Any, Literal, Protocol

from bson import ObjectId
from pymongo.collection import Collection
from pymongo.database import Database
from pymongo.errors import BulkWriteError, DuplicateKeyError, PyMongoError

from keycap_client.sink.time_buckets import Scope, marks_for, scopes_of, second_bucket

__all__ = [
    "RejectionInput",
    "RefusalRecorder",
    "MongoRefusalRecorder",
    "PeerRateLimiter",
    "ip_of_peer",
    "RATE_LIMITED_REFUSALS",
    "UNAVAILABLE_REFUSALS",
]

RATE_LIMITED_REFUSALS = "RATE_LIMITED_REFUSALS"
UNAVAILABLE_REFUSALS = "UNAVAILABLE_REFUSALS"
_AVAILABILITY_REASONS = frozenset({"SIGNING_KEYS_UNAVAILABLE", "LEDGER_UNAVAILABLE", "DATABASE_UNAVAILABLE"})
# Longest string copied from a request into a record: a hostile caller controls these.
_MAX_FIELD = 256
_log = logging.getLogger("keycap_client.sink")
_REJECTIONS = "rejections"
_LISTING_MARKS = "listing_marks"
# Mark ids this process knows are written; past this many the memo starts over.
_MARK_MEMO_LIMIT = 50_000
_DUPLICATE_KEY = 11000


@dataclass(frozen=True)
class RejectionInput:
    """What is known about a refused request (the ledger's RejectionInput)."""

    method: str
    reason: str
    code: str
    peer: str
    message: str
    tool_id_verified: bool
    tool_id: str = ""
    authenticated: bool | None = None
    attempted_key: str = ""
    capability_key: str = ""
    attempted_request_id: str = ""
    capability_request_id: str = ""
    call_id: str = ""
    capability_id: str = ""
    key_id: str = ""
    effect: str = ""
    principal: str = ""


class RefusalRecorder(Protocol):
    """Where a sink records its refusals. ``record`` must not raise."""

    def record(self, r: RejectionInput) -> None: ...

    def close(self) -> None: ...


@dataclass
class _Pending:
    kind: Literal["rl", "ua"]
    ip: str
    minute: int
    first: float
    last: float
    count: int = 0
    reasons: dict[str, int] = field(default_factory=dict)


class MongoRefusalRecorder:
    """Records a sink's refusals into keycap's ``rejections`` collection.

    ``service``: ``"sink:<name>"`` (a :class:`~keycap_client.sink.Sink` passes its own).

    Example::

        db = pymongo.MongoClient(uri, serverSelectionTimeoutMS=2000)["keycap"]
        refusals = MongoRefusalRecorder(db, service="sink:mailer")
    """

    def __init__(
        self,
        db: Database[Any],
        *,
        service: str,
        unauthenticated_per_minute: float = 60,
        flush_interval: float = 1.0,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self.service = service
        self._coll: Collection[Any] = db[_REJECTIONS]
        self._marks = _ListingMarks(db[_LISTING_MARKS], _REJECTIONS)
        self._counters = _StatsCounters(db["stats_counters"], service)
        self._clock = clock
        self._per_minute = unauthenticated_per_minute
        self._limiter = PeerRateLimiter(unauthenticated_per_minute, clock)
        self._pending: dict[tuple[str, str, int], _Pending] = {}
        self._lock = threading.Lock()
        self._flush_lock = threading.Lock()
        self._stop = threading.Event()
        self._indexed = self._create_indexes()
        self._flusher = threading.Thread(
            target=self._flush_loop, args=(flush_interval,), name="keycap-refusal-flush", daemon=True
        )
        self._flusher.start()

    def record(self, r: RejectionInput) -> None:
        """Records one refusal. Never raises: a failure is logged, the caller is refused anyway."""
        try:
            ip = ip_of_peer(r.peer)
            if r.reason in _AVAILABILITY_REASONS:
                self._accumulate("ua", ip, r.reason)
                return
            authenticated = r.tool_id_verified if r.authenticated is None else r.authenticated
            if not authenticated and not self._limiter.take(ip):
                self._accumulate("rl", ip, r.reason)
                return
            at = _utc(self._clock())
            tool_id = _clip(r.tool_id)
            doc = {
                "_id": str(ObjectId()),
                "service": self.service,
                "principal": _clip(r.principal),
                "tool_id": tool_id,
                "tool_id_verified": r.tool_id_verified,
                "reason": r.reason,
                "code": r.code,
                "method": _clip(r.method),
                "attempted_key": _clip(r.attempted_key),
                "capability_key": _clip(r.capability_key),
                "attempted_request_id": _clip(r.attempted_request_id),
                "capability_request_id": _clip(r.capability_request_id),
                "call_id": _clip(r.call_id),
                "capability_id": _clip(r.capability_id),
                "key_id": _clip(r.key_id),
                "effect": _clip(r.effect),
                "peer": _clip(r.peer),
                "message": _clip(r.message, 1024),
                "rejected_at": at,
                "lb": second_bucket(at),
                "count": 1,
            }
            # Marked first: a record is never missing from a listing (ADR 0033).
            self._marks.ensure(at, self._scopes(r.reason, tool_id))
            if not self._coll.insert_one(doc).acknowledged:
                raise PyMongoError("rejections insert was not acknowledged")
            self._counters.add(r.reason, tool_id, 1)
        except Exception:
            _log.exception("could not record a refusal; refusing anyway (reason %s, peer %s)", r.reason, r.peer[:64])

    def flush(self) -> None:
        """Writes the pending summaries now (also runs on a timer)."""
        with self._flush_lock:
            if not self._indexed:
                self._indexed = self._create_indexes()
            self._limiter.prune()
            with self._lock:
                batch, self._pending = list(self._pending.values()), {}
            for p in batch:
                try:
                    self._upsert_summary(p)
                    reason = UNAVAILABLE_REFUSALS if p.kind == "ua" else RATE_LIMITED_REFUSALS
                    self._counters.add(reason, "", p.count)
                except Exception:
                    _log.exception("could not record a summary of %d refusals from %s", p.count, p.ip[:64])
            self._counters.flush()

    def close(self) -> None:
        """Stops the timer and writes what is pending (the database client is the caller's)."""
        self._stop.set()
        self._flusher.join(timeout=5)
        self.flush()

    def _create_indexes(self) -> bool:
        """The equality indexes the listings read by (ADR 0033); False (logged) when the database
        could not be reached, and the flusher tries again."""
        try:
            # One index per command: FerretDB v1.24 drops the connection when one
            # createIndexes names several that already exist.
            self._coll.create_index([("lb", 1)], name="eq_lb")
            self._marks.coll.create_index([("up", 1)], name="eq_up")
            return True
        except Exception:
            _log.warning("refusal listing indexes not created yet; will retry", exc_info=True)
            return False

    def _scopes(self, reason: str, tool_id: str) -> list[Scope]:
        """The listings a record is in: all, by tool (when known), by reason, by service."""
        return scopes_of({"tool": tool_id, "reason": reason, "service": self.service})

    def _accumulate(self, kind: Literal["rl", "ua"], ip: str, reason: str) -> None:
        t = self._clock()
        minute = int(t // 60)
        with self._lock:
            p = self._pending.get((kind, ip, minute))
            if p is None:
                p = self._pending[(kind, ip, minute)] = _Pending(kind, ip, minute, t, t)
            p.count += 1
            p.last = t
            p.reasons[reason] = p.reasons.get(reason, 0) + 1

    def _upsert_summary(self, p: _Pending) -> None:
        # JSON keeps the parts apart whatever they contain (an IPv6 peer has colons).
        minute_iso = _utc(p.minute * 60).isoformat(timespec="milliseconds").replace("+00:00", "Z")
        sid = json.dumps([p.kind, self.service, p.ip, minute_iso], separators=(",", ":"), ensure_ascii=False)
        unavailable = p.kind == "ua"
        reason = UNAVAILABLE_REFUSALS if unavailable else RATE_LIMITED_REFUSALS
        first = _utc(p.first)
        inc: dict[str, int] = {"count": p.count}
        for counted, n in p.reasons.items():
            inc[f"reasons.{counted}"] = n
        on_insert = {
            "service": self.service,
            "principal": "",
            "tool_id": "",
            "tool_id_verified": False,
            "reason": reason,
            "code": "UNAVAILABLE" if unavailable else "UNAUTHENTICATED",
            "method": "",
            "attempted_key": "",
            "capability_key": "",
            "attempted_request_id": "",
            "capability_request_id": "",
            "call_id": "",
            "capability_id": "",
            "key_id": "",
            "effect": "",
            "peer": _clip(p.ip),
            "message": (
                f"calls from {_clip(p.ip, 64)} refused because keycap could not serve them "
                "(count = how many; reasons in the record); not the caller's fault"
                if unavailable
                else f"unauthenticated refusals from {_clip(p.ip, 64)} beyond {self._per_minute:g} per minute, "
                "summarised (count = how many; reasons in the record)"
            ),
            "rejected_at": first,
            "lb": second_bucket(first),
        }
        update = {"$inc": inc, "$setOnInsert": on_insert, "$max": {"last_rejected_at": _utc(p.last)}}
        # Marked before the upsert that may insert the summary. A later flush of the same minute
        # marks its own first second, which the summary does not carry: an empty bucket, skipped.
        self._marks.ensure(first, self._scopes(reason, ""))
        try:
            self._coll.update_one({"_id": sid}, update, upsert=True)
        except DuplicateKeyError:
            # Two replicas' first upserts raced: the second is an update now.
            self._coll.update_one({"_id": sid}, update, upsert=True)

    def _flush_loop(self, every: float) -> None:
        while not self._stop.wait(every):
            self.flush()


class _ListingMarks:
    """The directory marks of the listings a recorder writes to (ADR 0033): a record's marks are
    inserted before the record, each once per process (duplicates from other writers ignored)."""

    def __init__(self, coll: Collection[Any], listed: str) -> None:
        self.coll = coll
        self._listed = listed
        self._lock = threading.Lock()
        self._written: set[str] = set()

    def ensure(self, at: datetime, scopes: list[Scope]) -> None:
        """Inserts the marks of a record listed at ``at`` this process has not written yet.
        Raises (PyMongoError) when they may not all be there; then the record must not be written."""
        marks = marks_for(self._listed, at, scopes)
        with self._lock:
            missing = [m for m in marks if m["_id"] not in self._written]
        if not missing:
            return
        try:
            if not self.coll.insert_many(missing, ordered=False).acknowledged:
                raise PyMongoError("listing_marks insert was not acknowledged")
        except BulkWriteError as err:
            if not _only_duplicates(err.details):
                raise
        with self._lock:
            if len(self._written) + len(missing) > _MARK_MEMO_LIMIT:
                self._written.clear()
            self._written.update(m["_id"] for m in missing)


def _only_duplicates(details: Mapping[str, Any]) -> bool:
    """Whether a bulk insert failed only because some documents were there already."""
    errors = details.get("writeErrors") or []
    return bool(errors) and all(e.get("code") == _DUPLICATE_KEY for e in errors) and not details.get("writeConcernErrors")


class _StatsCounters:
    """This recorder's share of the refusal totals; it is the only writer of its document."""

    def __init__(self, coll: Collection[Any], service: str) -> None:
        self._coll = coll
        self._id = f"refusals:{service}:{uuid.uuid4()}"
        self._service = service
        self._started = datetime.now(timezone.utc)
        self._lock = threading.Lock()
        self._total = 0
        self._by_reason: dict[str, int] = {}
        self._by_tool: dict[str, int] = {}
        self._version = 0
        self._written = -1

    def add(self, reason: str, tool_id: str, n: int) -> None:
        with self._lock:
            self._total += n
            self._by_reason[reason] = self._by_reason.get(reason, 0) + n
            self._by_tool[tool_id] = self._by_tool.get(tool_id, 0) + n
            self._version += 1

    def flush(self) -> None:
        """Replaces the document with the running totals when they changed. Never raises."""
        with self._lock:
            version = self._version
            if version == self._written:
                return
            doc = {
                "_id": self._id,
                "kind": "refusals",
                "service": self._service,
                "pid": os.getpid(),
                "started_at": self._started,
                "updated_at": datetime.now(timezone.utc),
                "counts": {"rejections": self._total},
                # {k, n} items: a tool id may hold "." or "$", and FerretDB v1 refuses nested arrays.
                "by_reason": [{"k": r, "n": n} for r, n in self._by_reason.items()],
                "by_tool": [{"k": t, "n": n} for t, n in self._by_tool.items()],
            }
        try:
            self._coll.replace_one({"_id": self._id}, doc, upsert=True)
            with self._lock:
                self._written = max(self._written, version)
        except Exception:
            _log.warning("stats counters not written; will retry", exc_info=True)


class PeerRateLimiter:
    """Token bucket per peer IP: ``per_minute`` tokens, refilled continuously."""

    def __init__(self, per_minute: float, clock: Callable[[], float] = time.time) -> None:
        self._per_minute = per_minute
        self._per_s = per_minute / 60
        self._clock = clock
        self._buckets: dict[str, tuple[float, float]] = {}
        self._lock = threading.Lock()

    def take(self, ip: str) -> bool:
        """Takes one token for ``ip``; False when its bucket is empty."""
        t = self._clock()
        with self._lock:
            b = self._buckets.get(ip)
            tokens = min(self._per_minute, b[0] + (t - b[1]) * self._per_s) if b else self._per_minute
            if tokens < 1:
                self._buckets[ip] = (tokens, t)
                return False
            self._buckets[ip] = (tokens - 1, t)
            return True

    def prune(self) -> None:
        """Forgets peers whose bucket has refilled completely."""
        t = self._clock()
        with self._lock:
            self._buckets = {
                ip: b for ip, b in self._buckets.items() if b[0] + (t - b[1]) * self._per_s < self._per_minute
            }


_BRACKETED = re.compile(r"\[([^\]]+)\](?::\d+)?")


def ip_of_peer(peer: str) -> str:
    """The IP part of a peer string (``ipv4:127.0.0.1:5000``, ``[::1]:5000``, ``10.0.0.1:80``)."""
    p = re.sub(r"^ipv[46]:", "", peer)
    m = _BRACKETED.fullmatch(p)
    if m:
        return m.group(1)
    at = p.rfind(":")
    if at > 0 and p[at + 1 :].isdigit() and p[at + 1 :].isascii():
        p = p[:at]
    return p or "unknown"


def _clip(v: str, limit: int = _MAX_FIELD) -> str:
    return v[:limit] + "…" if len(v) > limit else v


def _utc(seconds: float) -> datetime:
    # Millisecond precision, as the ledger's JavaScript Dates store.
    return datetime.fromtimestamp(round(seconds * 1000) / 1000, timezone.utc)
