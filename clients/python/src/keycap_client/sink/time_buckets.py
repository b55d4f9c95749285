"""Time buckets of the operator listings (ADR 0033): what a listed record carries (``lb``) and
which directory marks (collection ``listing_marks``) say its buckets are non-empty.

Pure. The format is part of the storage contract: it must match the TypeScript services'
(services/common/src/domain/time-buckets.ts), checked against test/vectors/time-buckets.json.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from datetime import datetime, timezone
from typing import Any

__all__ = ["LEVELS", "Scope", "second_bucket", "bucket_start", "mark_id", "root_id", "marks_for", "scopes_of"]

#: Levels of the directory, coarsest first, and the UTC digits each bucket keeps.
LEVELS: tuple[tuple[str, int], ...] = (("d", 8), ("h", 10), ("m", 12), ("s", 14))


@dataclass(frozen=True)
class Scope:
    """One listing a record belongs to: ``all`` (value "") or a filter and its value."""

    scope: str
    value: str


def second_bucket(at: datetime) -> str:
    """``YYYYMMDDHHmmss`` of a time, UTC (a naive datetime is taken as UTC, as pymongo returns
    them). Every coarser bucket is a prefix of it."""
    utc = at.replace(tzinfo=timezone.utc) if at.tzinfo is None else at.astimezone(timezone.utc)
    return f"{utc.year:04d}{utc.month:02d}{utc.day:02d}{utc.hour:02d}{utc.minute:02d}{utc.second:02d}"


def bucket_start(bucket: str) -> datetime:
    """The start of a bucket of any level (a prefix of a second bucket), UTC."""

    def part(start: int, length: int, default: int) -> int:
        return int(bucket[start : start + length]) if len(bucket) >= start + length else default

    return datetime(
        part(0, 4, 1970), part(4, 2, 1), part(6, 2, 1), part(8, 2, 0), part(10, 2, 0), part(12, 2, 0), tzinfo=timezone.utc
    )


def mark_id(coll: str, scope: Scope, level: str, bucket: str) -> str:
    """The ``_id`` of a mark; the value goes last, so it may contain any character."""
    return f"{coll}/{scope.scope}/{level}/{bucket}/{scope.value}"


def root_id(coll: str, scope: Scope) -> str:
    """The root of a listing: its children are the days that have records."""
    return mark_id(coll, scope, "r", "")


def marks_for(coll: str, at: datetime, scopes: list[Scope]) -> list[dict[str, Any]]:
    """Every mark a record listed at ``at`` needs, for each of its scopes, coarsest first:
    ``{_id, up, coll, scope, level, at}`` (``at`` the bucket's start, an aware UTC datetime)."""
    second = second_bucket(at)
    out: list[dict[str, Any]] = []
    for scope in scopes:
        up = root_id(coll, scope)
        for level, digits in LEVELS:
            bucket = second[:digits]
            mid = mark_id(coll, scope, level, bucket)
            out.append({"_id": mid, "up": up, "coll": coll, "scope": scope.scope, "level": level, "at": bucket_start(bucket)})
            up = mid
    return out


def scopes_of(filters: Mapping[str, str | None]) -> list[Scope]:
    """The scopes of a record: ``all``, then each named filter whose value is not empty, in order."""
    return [Scope("all", "")] + [Scope(name, value) for name, value in filters.items() if value]
