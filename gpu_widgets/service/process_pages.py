"""The ``processes`` answer in pages: every GPU process can be listed, but never in one answer.

A GPU's processes come ordered by GPU memory, the largest first (``sampling.snapshot.by_memory``);
a page is ``[offset, offset + limit)`` of each listed GPU's list, with ``processes_total`` the
length of the whole list, so a client pages until ``offset + limit >= processes_total``. Listed
over every GPU, ``limit`` is lowered so that one answer holds at most ``MAX_ROWS`` processes
(the answer's ``limit`` says so, as ``samples`` does for ``max_points``).
"""
from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any

from . import attribution, json_pieces, privacy

DEFAULT_LIMIT = 100
MAX_LIMIT = 1000
# ~700 bytes a process with its kernel and notebook: an answer stays near 1.5 MB.
MAX_ROWS = 2000
MAX_OFFSET = 1 << 31


def page(devices: Sequence[Mapping[str, Any]], offset: int, limit: int,
         gpu: int | None) -> tuple[list[dict[str, Any]], int]:
    """The devices of one page (shallow copies, their process lists cut) and the limit applied."""
    listed = [d for d in devices if gpu is None or d["index"] == gpu]
    limit = min(limit, max(1, MAX_ROWS // max(1, len(listed))))
    out = []
    for dev in listed:
        procs = dev.get("processes")
        cut = dict(dev)
        cut["processes"] = None if procs is None else procs[offset:offset + limit]
        cut["processes_total"] = None if procs is None else len(procs)
        out.append(cut)
    return out, limit


def with_totals(attributed: list[dict[str, Any]], listed: Sequence[Mapping[str, Any]]) -> list[dict[str, Any]]:
    """The attributed devices (attribution.attribute) with ``processes_total`` after their processes."""
    out = []
    for dev, cut in zip(attributed, listed):
        shaped: dict[str, Any] = {}
        for key, value in dev.items():
            shaped[key] = value
            if key == "processes":
                shaped["processes_total"] = cut["processes_total"]
        out.append(shaped)
    return out


def no_orphans(pid: int) -> None:
    return None


def answer(head: Mapping[str, Any], listed: Sequence[Mapping[str, Any]], roots: dict[int, str],
           paths: dict[str, str], me: int | None,
           orphan_of: Callable[[int], dict[str, Any] | None] = no_orphans) -> bytes:
    """The JSON of one page, UTF-8: ``head`` then the listed devices, their processes attributed
    to kernels (or, left by one that ended, ``orphan_of`` it: orphans.py) and redacted for uid
    ``me`` (None: shown in full). Runs in a worker thread."""

    def shaped(cut: Any) -> dict[str, Any]:
        # One device at a time, encoded at once (json_pieces.py): its copies die young.
        dev = attribution.attribute([cut], roots, paths)[0]
        if dev["processes"]:
            dev["processes"] = [{**p, "orphan_of": orphan_of(p["pid"])} for p in dev["processes"]]
        if me is not None and dev["processes"]:
            dev["processes"] = [privacy.redact_process(p, me) for p in dev["processes"]]
        return with_totals([dev], [cut])[0]

    return json_pieces.object_with_list(head, "devices", listed, shaped).encode()
