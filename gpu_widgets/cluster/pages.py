"""One page of the overview's hosts, as the panel asks for it: filtered, sorted, at most 100 rows.

The overview round keeps every host's row (overview.build); each request picks its page from that
cached answer, so Prometheus is asked once per refresh whatever the pollers ask. A page is also cut
to ROWS_BUDGET_BYTES (hosts with 1,024-character names), and says where it starts and how many hosts
match, so that the panel pages through every host with at most ~48 KB of rows per refresh.
"""
from __future__ import annotations

import json
from collections import OrderedDict
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from .overview import HOST_COLUMNS

# The rows' share of the sidebar's 64 KB per refresh (the rest: one host's detail, the head).
ROWS_BUDGET_BYTES = 48_000
MAX_PAGE_ROWS = 100
MAX_FILTER_CHARS = 1024  # a host name's limit (hostnames.MAX_HOST_CHARS): longer matches nothing
MAX_OFFSET = 10_000_000
# Pages kept per overview answer (pollers with the same view share one; a new answer starts afresh).
MAX_CACHED_PAGES = 64

# sort key -> the column it orders by (None: by host name)
SORT_COLUMNS: dict[str, str | None] = {
    "host": None, "gpus": "gpu_count", "busy": "busy_gpus", "free": "free_gpus",
    "utilization": "utilization_mean_percent", "utilization_max": "utilization_max_percent",
    "memory": "memory_used_gib", "temperature": "temperature_max_c", "power": "power_w"}
ACTIVITIES = ("all", "busy", "free", "stale")

_AT = {name: i for i, name in enumerate(HOST_COLUMNS)}
_NAME, _CURRENT, _STALE = _AT["hostname"], _AT["current"], _AT["stale"]
_BUSY, _FREE = _AT["busy_gpus"], _AT["free_gpus"]


@dataclass(frozen=True)
class PageQuery:
    filter: str = ""
    sort: str = "host"
    descending: bool = False
    activity: str = "all"
    offset: int = 0
    limit: int = MAX_PAGE_ROWS


def _matches(row: Sequence[Any], words: list[str], activity: str) -> bool:
    stale = row[_STALE]
    # A stale host's old readings say nothing about now: neither busy nor free.
    if (activity == "stale" and not stale) or (activity == "busy" and (stale or not row[_BUSY])) \
            or (activity == "free" and (stale or not row[_FREE])):
        return False
    hay = row[_NAME].lower() + (" this server" if row[_CURRENT] else "")
    return all(w in hay for w in words)


def ordered(rows: list[list[Any]], sort: str, descending: bool) -> list[list[Any]]:
    """``rows`` (sorted by name) by a column: unknown values and stale hosts last in either direction,
    ties by name, so that the order does not jump between refreshes."""
    column = SORT_COLUMNS[sort]
    if column is None:
        return list(reversed(rows)) if descending else list(rows)
    at = _AT[column]
    known = [r for r in rows if not r[_STALE] and r[at] is not None]
    unknown = [r for r in rows if r[_STALE] or r[at] is None]
    # stable sorts: name order survives among equal values
    known.sort(key=lambda r: -r[at] if descending else r[at])
    return known + unknown


def _within_budget(rows: list[list[Any]]) -> list[list[Any]]:
    kept, size = [], 0
    for row in rows:
        size += len(json.dumps(row, separators=(",", ":"))) + 1
        if size > ROWS_BUDGET_BYTES and kept:  # one row always fits: 1,024 characters are ~4 KB at most
            break
        kept.append(row)
    return kept


def page(payload: dict[str, Any], query: PageQuery) -> dict[str, Any]:
    """The overview ``payload`` (every host's row) with only the rows of ``query``'s page."""
    words = query.filter.lower().split()
    rows = payload["hosts"]
    if words or query.activity != "all":
        rows = [r for r in rows if _matches(r, words, query.activity)]
    matched = len(rows)
    # Past the end (the hosts shrank since the panel asked): the last page instead of an empty one.
    offset = query.offset if query.offset < matched else max(0, matched - query.limit)
    listed = _within_budget(ordered(rows, query.sort, query.descending)[offset:offset + query.limit])
    return {**payload, "hosts": listed, "matched_hosts": matched, "offset": offset, "limit": query.limit}


class Pages:
    """The overview answer of one round, and the pages asked of it, encoded once each."""

    def __init__(self, payload: dict[str, Any]) -> None:
        self.payload = payload
        self._bodies: OrderedDict[PageQuery, str] = OrderedDict()

    def cached(self, query: PageQuery) -> str | None:
        return self._bodies.get(query)

    def make(self, query: PageQuery) -> str:
        """The page's JSON (thread-safe to compute; ``keep`` it from the loop)."""
        return json.dumps(page(self.payload, query), allow_nan=False, separators=(",", ":"))

    def keep(self, query: PageQuery, body: str) -> None:
        self._bodies[query] = body
        while len(self._bodies) > MAX_CACHED_PAGES:
            self._bodies.popitem(last=False)
