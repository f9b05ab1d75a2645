"""Where the memory went: a snapshot's trace replayed into allocated bytes over time, its peak,
and the allocation sites alive at the peak.

One pass over the chosen device's trace turns it into numpy arrays (about 40 bytes an entry:
kind, size, time, site, the entry that freed each allocation); everything after is array work,
so a 10^6-entry trace costs seconds and tens of MB beyond the loaded snapshot itself.

- Allocated bytes rise at ``alloc`` and fall at ``free_completed`` (when the allocator can reuse
  the block, as PyTorch's own viewer counts). A trace holding no ``free_completed`` at all falls
  back to ``free_requested``.
- Memory alive before the recording began (the allocator keeps only the last ``max_entries``
  entries, and recording may start late) is counted from the start: a free of an address the
  trace never allocated was alive from the start until that free, and a block the snapshot's
  ``segments`` show allocated at the end that the trace never allocated was alive throughout.
  Both are one site, ``BEFORE``.
- A site is the allocating frame: the innermost frame that is not PyTorch's (a ``torch/`` path),
  Python's own (the standard library, ``<frozen ...>``), gpu_widgets', or C++ (frames recorded
  with ``context="all"``). Where every frame is such, the innermost frame stands for the site.
- The chart's series are sampled at a bounded number of moments (``points``): in each time
  bucket the moments of its highest and lowest total, plus the peak, so the envelope and the
  peak survive decimation.
"""
from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any

import numpy as np

BEFORE = "(allocated before the recording)"
NO_STACK = "(no stack recorded)"
ALLOC, FREE, FREE_UNKNOWN, OTHER = 1, 2, 3, 0
MAX_BYTES = 1 << 50  # a larger "size" (1 PiB) is not memory anyone has: the entry is ignored
MAX_OOMS = 100  # kept with their times; the header names 3
_INTERNAL = re.compile(
    r"(^|[/\\])(torch|torchgen|functorch|triton|gpu_widgets)[/\\]"  # PyTorch's and ours
    r"|[/\\]lib[/\\]python3[.\d]*[/\\](?!site-packages|dist-packages)"  # the standard library
    r"|^<frozen |^<string>$")


def is_internal(filename: str) -> bool:
    """A frame that does not count as the allocation's site (see the module's docstring)."""
    if _INTERNAL.search(filename):
        return True
    # C++ frames (context="all"): a .cpp/.h path, a shared object, or "??"
    return not (filename.endswith(".py") or filename.startswith("<"))


@dataclass
class Site:
    site: str  # "file:line"
    function: str


@dataclass
class Trace:
    """One device's trace as arrays (see the module's docstring)."""

    device: int
    kind: np.ndarray  # int8: ALLOC / FREE / FREE_UNKNOWN / OTHER
    size: np.ndarray  # int64: bytes an ALLOC asked for (0 elsewhere)
    released: np.ndarray  # int64: bytes freed at the entry (a free; an alloc reusing a live address)
    time_s: np.ndarray  # float64 seconds since the first entry (the entry's index without time_us)
    site: np.ndarray  # int32: index into sites, for ALLOC; -1 elsewhere
    freed_at: np.ndarray  # int64: for ALLOC, the entry that freed it (len(kind): never freed)
    sites: list[Site]
    before_end_bytes: int  # allocated before the recording and still allocated at its end
    before_end_blocks: int  # how many blocks those are
    timed: bool  # time_us was there
    ooms: list[dict[str, Any]] = field(default_factory=list)


def _internal(filename: Any, known: dict[Any, bool]) -> bool:
    if not isinstance(filename, str):
        return True  # not a frame anyone could read
    found = known.get(filename)
    if found is None:
        found = known[filename] = is_internal(str(filename))
    return found


def _site_of(frames: Any, cache: dict[tuple, int], sites: list[Site], known: dict[Any, bool]) -> int:
    if not isinstance(frames, list) or not frames:
        key: tuple = (NO_STACK,)
        chosen = None
    else:
        chosen = next((f for f in frames if isinstance(f, dict) and not _internal(f.get("filename", ""), known)),
                      frames[0])
        if not isinstance(chosen, dict):
            chosen = {}
        line = chosen.get("line", 0)
        key = (str(chosen.get("filename", "?")), line if isinstance(line, int) else 0, str(chosen.get("name", "?")))
    index = cache.get(key)
    if index is None:
        index = cache[key] = len(sites)
        sites.append(Site(NO_STACK, "") if chosen is None else Site(f"{key[0]}:{key[1]}", key[2]))
    return index


def _end_blocks(segments: list[Any], device: int) -> dict[int, int]:
    """{address: size} of the blocks allocated when the snapshot was taken, on ``device``."""
    blocks: dict[int, int] = {}
    for seg in segments:
        if not isinstance(seg, dict) or seg.get("device", device) != device:
            continue
        address = seg.get("address")
        listed = seg.get("blocks")
        for block in listed if isinstance(listed, list) else ():
            if not isinstance(block, dict):
                continue
            size = block.get("size")
            if not isinstance(size, int) or not 0 <= size <= MAX_BYTES:
                continue
            at = block.get("address", address)
            if block.get("state") in ("active_allocated", "active_pending_free") and isinstance(at, int):
                blocks[at] = size
            if isinstance(address, int):
                address = (at if isinstance(at, int) else address) + size
    return blocks


def encode(snapshot: dict[str, Any], device: int) -> Trace:
    """The device's trace as arrays: the one pass in Python."""
    entries = snapshot["device_traces"][device]
    n = len(entries)
    kind = np.zeros(n, np.int8)
    size = np.zeros(n, np.int64)
    released = np.zeros(n, np.int64)
    times = np.full(n, np.nan)
    site = np.full(n, -1, np.int32)
    freed_at = np.full(n, n, np.int64)
    sites: list[Site] = []
    cache: dict[tuple, int] = {}
    known: dict[Any, bool] = {}
    alive: dict[int, int] = {}  # address -> index of its alloc
    completes = any(isinstance(e, dict) and e.get("action") == "free_completed" for e in entries)
    free_word = "free_completed" if completes else "free_requested"
    ooms: list[dict[str, Any]] = []
    for i, e in enumerate(entries):
        if not isinstance(e, dict):
            continue
        action = e.get("action")
        t = e.get("time_us")
        if isinstance(t, (int, float)) and abs(t) < 1e18:
            times[i] = t
        addr, nbytes = e.get("addr"), e.get("size")
        if not (isinstance(addr, int) and isinstance(nbytes, int) and 0 <= nbytes <= MAX_BYTES):
            addr, nbytes = None, None  # untrusted: only whole numbers in range count
        if action == "oom":
            if len(ooms) >= MAX_OOMS:
                continue
            free = e.get("device_free")
            ooms.append({"index": i, "requested_bytes": e.get("size") if isinstance(e.get("size"), int) else None,
                         "device_free_bytes": free if isinstance(free, int) else None})
        elif nbytes is None:
            continue
        elif action == "alloc":
            previous = alive.get(addr)
            if previous is not None:  # reused without a recorded free: the old one ends here
                freed_at[previous] = i
                released[i] = size[previous]
            alive[addr] = i
            kind[i], size[i] = ALLOC, nbytes
            site[i] = _site_of(e.get("frames"), cache, sites, known)
        elif action == free_word:
            j = alive.pop(addr, None)
            if j is None:
                if nbytes > 0:
                    kind[i], released[i] = FREE_UNKNOWN, nbytes
            else:
                kind[i], released[i] = FREE, size[j]
                freed_at[j] = i
    ends = _end_blocks(snapshot.get("segments") or [], device)
    kept = [nbytes for addr, nbytes in ends.items() if addr not in alive]
    timed = bool(n) and not np.isnan(times).all()
    if timed:
        times = np.fmax.accumulate(np.where(np.isnan(times), -np.inf, times))  # gaps take the time before
        times[np.isinf(times)] = np.nanmin(times[np.isfinite(times)])
        times = (times - times[0]) / 1e6
    else:
        times = np.arange(n, dtype=float)
    for oom in ooms:
        oom["time_s"] = float(times[oom["index"]])
    return Trace(device, kind, size, released, times, site, freed_at, sites, sum(kept), len(kept), timed, ooms)


def allocated(trace: Trace) -> np.ndarray:
    """Allocated bytes after each entry, memory from before the recording included."""
    # float64: exact to 8 PiB, and a damaged trace's sums cannot wrap around as int64 would
    start = float(trace.released[trace.kind == FREE_UNKNOWN].sum()) + trace.before_end_bytes
    return start + np.cumsum(trace.size - trace.released, dtype=np.float64)


@dataclass
class Analysis:
    device: int
    peak_bytes: int
    peak_index: int
    peak_time_s: float
    sites_at_peak: list[dict[str, Any]]
    times_s: np.ndarray  # the sampled moments (float32 for the chart)
    series: list[tuple[str, np.ndarray]]  # (label, bytes at each moment), largest site first; "other" last
    total: np.ndarray  # allocated bytes at each moment
    peak_sample: int  # the peak's position among the sampled moments
    entries: int
    timed: bool
    ooms: list[dict[str, Any]]


def sample_moments(total: np.ndarray, times: np.ndarray, peak: int, points: int) -> np.ndarray:
    """Entry indices to draw: each time bucket's highest and lowest moment, and the peak."""
    n = total.size
    if n <= points:
        return np.arange(n)
    buckets = max(1, points // 2)
    span = times[-1] - times[0]
    if span > 0:
        bucket = np.minimum(((times - times[0]) / span * buckets).astype(np.int64), buckets - 1)
    else:
        bucket = np.arange(n) * buckets // n
    chosen = [np.array([0, n - 1, peak])]
    for pick in (np.argmax, np.argmin):
        order = np.lexsort((total if pick is np.argmin else -total, bucket))  # bucket, then the extreme first
        first = np.flatnonzero(np.diff(bucket[order], prepend=-1) != 0)
        chosen.append(order[first])
    return np.unique(np.concatenate(chosen))


def analyse(trace: Trace, top: int = 6, points: int = 1200) -> Analysis:
    """The peak, the sites alive at it, and the chart's series (``top`` sites + other)."""
    total = allocated(trace)
    peak = int(np.argmax(total))
    n = total.size
    alive = (trace.kind == ALLOC) & (np.arange(n) <= peak) & (trace.freed_at > peak)
    n_sites = len(trace.sites)
    at_peak = np.bincount(trace.site[alive], weights=trace.size[alive], minlength=n_sites) if n_sites else np.zeros(0)
    counts = np.bincount(trace.site[alive], minlength=n_sites) if n_sites else np.zeros(0, np.int64)
    later_unknown = (trace.kind == FREE_UNKNOWN) & (np.arange(n) > peak)
    before_bytes = int(trace.released[later_unknown].sum()) + trace.before_end_bytes
    rows = [{"site": s.site, "function": s.function, "bytes": int(at_peak[k]), "count": int(counts[k])}
            for k, s in enumerate(trace.sites) if counts[k]]
    if before_bytes:
        rows.append({"site": BEFORE, "function": "", "bytes": before_bytes,
                     "count": int(later_unknown.sum()) + trace.before_end_blocks})
    rows.sort(key=lambda r: (-r["bytes"], r["site"]))
    moments = sample_moments(total, trace.time_s, peak, points)
    series = []
    shown = 0.0
    named = [r for r in rows[:top] if r["site"] != BEFORE]
    index_of = {(s.site, s.function): k for k, s in enumerate(trace.sites)}
    for row in named:
        k = index_of[(row["site"], row["function"])]
        mine = trace.site == k  # only ALLOC entries carry a site
        delta = np.where(mine, trace.size, 0).astype(np.float64)
        delta -= np.bincount(trace.freed_at[mine], weights=trace.size[mine], minlength=n + 1)[:n]
        curve = np.cumsum(delta)[moments]  # each allocation falls at the entry that freed it
        series.append((row["site"], curve.astype(np.float64)))
        shown = shown + curve
    series.append(("other", (total[moments] - shown).astype(np.float64)))
    return Analysis(trace.device, int(round(total[peak])), peak, float(trace.time_s[peak]), rows,
                    trace.time_s[moments], series, total[moments], int(np.searchsorted(moments, peak)), n, trace.timed, trace.ooms)


def analyse_snapshot(snapshot: dict[str, Any], device: int | None = None, **options: Any) -> Analysis:
    """Analyse ``device``'s trace (default: the device with the largest peak)."""
    traces = snapshot["device_traces"]
    if device is None:  # the device with the largest peak; one trace in memory at a time beside the best
        best: tuple[int, Trace] | None = None
        for d, entries in enumerate(traces):
            if entries:
                trace = encode(snapshot, d)
                peak = int(allocated(trace).max())
                if best is None or peak > best[0]:
                    best = (peak, trace)
                del trace
        if best is None:
            raise ValueError("the snapshot has no trace entries")
        return analyse(best[1], **options)
    if isinstance(device, bool) or not isinstance(device, int):
        raise TypeError(f"device must be a device index (int), got {type(device).__name__}")
    elif not 0 <= device < len(traces) or not traces[device]:
        recorded = [d for d, t in enumerate(traces) if t]
        raise ValueError(f"device {device} has no trace entries in this snapshot (recorded: {recorded})")
    return analyse(encode(snapshot, device), **options)
