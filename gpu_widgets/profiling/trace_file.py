"""Reading a profiler trace: the Chrome-trace JSON torch.profiler (Kineto) exports, untrusted.

Only what the analysis needs is kept: complete events (``"ph": "X"``) with a category, a name,
a start and a duration in microseconds, their process and thread, and a few ``args``; plus the
GPUs' ``deviceProperties``. A file over MAX_BYTES (read, or once decompressed), more than
MAX_EVENTS events, JSON that is not a trace, or JSON nested too deeply is a ``TraceError`` that
says which; events with fields of the wrong type are skipped and counted.
"""
from __future__ import annotations

import gzip
import json
import math
import os
import zlib
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

MAX_BYTES = 1 << 30  # 1 GiB of JSON: a few hundred steps of a large model, profiled with stacks
MAX_EVENTS = 5_000_000
KEPT_ARGS = ("External id", "correlation", "device", "stream", "bytes", "Python id", "Python parent id")


class TraceError(ValueError):
    """A file that is not a trace torch.profiler wrote (the message names the file and why)."""


@dataclass(frozen=True)
class Event:
    cat: str
    name: str
    ts: float  # microseconds, on the trace's clock
    dur: float
    pid: Any
    tid: Any
    args: dict[str, Any]

    @property
    def end(self) -> float:
        return self.ts + self.dur


@dataclass
class Trace:
    events: list[Event]
    devices: list[dict[str, Any]] = field(default_factory=list)  # deviceProperties
    skipped: int = 0  # events left out: a field of the wrong type


def read_trace(path: str | os.PathLike) -> Trace:
    p = Path(path).expanduser()
    if p.is_dir():
        found = sorted(p.glob("*.pt.trace.json*"), key=lambda f: f.stat().st_mtime)
        hint = f" (the latest trace in it: {found[-1].name})" if found else " (no *.pt.trace.json file in it)"
        raise IsADirectoryError(f"{p} is a directory, not a trace file: pass one of its trace files{hint}")
    if not p.is_file():
        raise FileNotFoundError(f"no such trace file: {p}" if not p.exists() else f"{p} is not a regular file")
    data = _read_bytes(p)
    try:
        doc = json.loads(data)
    except RecursionError:
        raise TraceError(f"{p}: not a profiler trace (JSON nested too deeply)") from None
    except (UnicodeDecodeError, ValueError) as exc:
        raise TraceError(f"{p}: not a profiler trace (not JSON: {exc})") from None
    return parse_trace(doc, str(p))


def _read_bytes(p: Path) -> bytes:
    with open(p, "rb") as f:
        head = f.read(2)
        f.seek(0)
        stream = gzip.GzipFile(fileobj=f) if head == b"\x1f\x8b" else f
        try:
            data = stream.read(MAX_BYTES + 1)
        except (OSError, EOFError, zlib.error) as exc:
            raise TraceError(f"{p}: not a profiler trace (a damaged gzip file: {exc})") from None
    if len(data) > MAX_BYTES:
        raise TraceError(f"{p}: over {_size(MAX_BYTES)} of JSON; profile fewer steps")
    return data


def _size(n: int) -> str:
    return f"{n / (1 << 30):g} GiB" if n >= 1 << 30 else f"{n / (1 << 20):g} MiB" if n >= 1 << 20 else f"{n:,} bytes"


def parse_trace(doc: Any, where: str = "trace") -> Trace:
    """A trace from its parsed JSON: an object with a "traceEvents" list (or the list itself)."""
    raw = doc.get("traceEvents") if isinstance(doc, dict) else doc
    if not isinstance(raw, list):
        raise TraceError(f"{where}: not a profiler trace (no \"traceEvents\" list; torch.profiler's "
                         "export_chrome_trace writes one)")
    if len(raw) > MAX_EVENTS:
        raise TraceError(f"{where}: {len(raw):,} events, more than {MAX_EVENTS:,}; profile fewer steps")
    events, skipped, entries = [], 0, 0
    for e in raw:
        if not isinstance(e, dict) or not isinstance(e.get("ph"), str):
            skipped += 1  # not a trace event at all
            continue
        entries += 1
        if e["ph"] != "X":
            continue  # metadata, flows, instants: nothing the analysis reads
        ev = _event(e)
        if ev is None:
            skipped += 1
        else:
            events.append(ev)
    if raw and not entries:
        raise TraceError(f"{where}: not a profiler trace (none of its {len(raw):,} entries is a trace event "
                         "with a \"ph\" phase)")
    devices = doc.get("deviceProperties") if isinstance(doc, dict) else None
    devices = [d for d in devices if isinstance(d, dict)][:64] if isinstance(devices, list) else []
    return Trace(events, devices, skipped)


def _event(e: dict[str, Any]) -> Event | None:
    cat, name, ts, dur = e.get("cat"), e.get("name"), e.get("ts"), e.get("dur", 0)
    if not isinstance(cat, str) or not isinstance(name, str) or not _num(ts) or not _num(dur) or dur < 0:
        return None
    args = e.get("args")
    kept = {k: args[k] for k in KEPT_ARGS if k in args} if isinstance(args, dict) else {}
    pid, tid = e.get("pid"), e.get("tid")
    return Event(cat, name[:512], float(ts), float(dur), pid if _key(pid) else None, tid if _key(tid) else None, kept)


def _num(v: Any) -> bool:
    return isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v)


def _key(v: Any) -> bool:
    return isinstance(v, (int, str)) and not isinstance(v, bool)
