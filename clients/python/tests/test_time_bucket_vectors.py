"""Every time-bucket vector (test/vectors/time-buckets.json, from the TypeScript module):
keycap_client.sink.time_buckets gives the same lb and the same listing_marks, field for field
(ADR 0033: the Python refusal recorder writes the format the services list by)."""

from __future__ import annotations

import json
from datetime import datetime, timedelta, timezone
from typing import Any

import pytest

from conftest import REPO_ROOT
from keycap_client.sink.time_buckets import marks_for, scopes_of, second_bucket

VECTORS: dict[str, Any] = json.loads((REPO_ROOT / "test/vectors/time-buckets.json").read_text())


def _instant(iso: str) -> datetime:
    return datetime.fromisoformat(iso.replace("Z", "+00:00"))


def _iso(at: datetime) -> str:
    """As JavaScript's toISOString: UTC, milliseconds, Z."""
    assert at.utcoffset() == timedelta(0)
    return at.isoformat(timespec="milliseconds").replace("+00:00", "Z")


def test_there_are_vectors() -> None:
    assert len(VECTORS["cases"]) >= 4


@pytest.mark.parametrize("case", VECTORS["cases"], ids=lambda c: f"{c['coll']}@{c['at']}")
def test_lb_and_marks_match_the_vector(case: dict[str, Any]) -> None:
    at = _instant(case["at"])
    assert second_bucket(at) == case["lb"]
    marks = marks_for(case["coll"], at, scopes_of(case["filters"]))
    assert [{**m, "at": _iso(m["at"])} for m in marks] == case["marks"]
    # Every mark has exactly the stored fields, and the dates are timezone-aware UTC.
    assert all(list(m) == ["_id", "up", "coll", "scope", "level", "at"] for m in marks)
    assert all(m["at"].tzinfo is timezone.utc for m in marks)


def test_second_bucket_takes_a_naive_datetime_as_utc_and_converts_other_zones() -> None:
    assert second_bucket(datetime(2026, 12, 6, 11, 59, 13, 999000)) == "20261206115913"
    east = timezone(timedelta(hours=2))
    assert second_bucket(datetime(2026, 1, 1, 1, 30, 5, tzinfo=east)) == "20251231233005"
