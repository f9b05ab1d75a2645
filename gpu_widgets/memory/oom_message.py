"""The facts in PyTorch's out-of-memory message, as numbers.

PyTorch (2.1 and later) words a CUDA OOM as: "CUDA out of memory. Tried to allocate 2.00 GiB. GPU 0
has a total capacity of 79.19 GiB of which 512.00 MiB is free. Process 4242 has 30.00 GiB memory in
use. Including non-PyTorch memory, this process has 48.60 GiB memory in use. Of the allocated
memory 40.00 GiB is allocated by PyTorch, and 7.50 GiB is reserved by PyTorch but unallocated. ...";
older versions: "Tried to allocate 20.00 MiB (GPU 0; 11.17 GiB total capacity; 10.57 GiB already
allocated; 11.81 MiB free; 10.68 GiB reserved in total by PyTorch)". Each fact is looked for on its
own, so a message in neither form still gives the parts it has (the rest are None).
"""
from __future__ import annotations

import re
from typing import Any

UNITS = {"bytes": 1, "b": 1, "kib": 1 << 10, "mib": 1 << 20, "gib": 1 << 30, "tib": 1 << 40,
         "kb": 1 << 10, "mb": 1 << 20, "gb": 1 << 30, "tb": 1 << 40}
_SIZE = r"(\d+(?:\.\d+)?)\s*(bytes|[KMGT]i?B|B)"
MAX_MESSAGE = 20_000  # a message longer than this is read only this far

_PATTERNS = {
    "requested_bytes": re.compile(r"Tried to allocate " + _SIZE, re.I),
    "total_bytes": re.compile(r"total capacity of " + _SIZE + r"|" + _SIZE + r" total capacity", re.I),
    "free_bytes": re.compile(r"of which " + _SIZE + r" is free|" + _SIZE + r" free\b", re.I),
    "allocated_bytes": re.compile(_SIZE + r" is allocated by PyTorch|" + _SIZE + r" already allocated", re.I),
    "reserved_unallocated_bytes": re.compile(_SIZE + r" is reserved by PyTorch but unallocated", re.I),
    "reserved_bytes": re.compile(_SIZE + r" reserved in total by PyTorch", re.I),
    "this_process_bytes": re.compile(r"this process has " + _SIZE + r" memory in use", re.I),
}
_GPU = re.compile(r"\bGPU (\d+)\b")
_PROCESS = re.compile(r"Process (\d+) has " + _SIZE + r" memory in use", re.I)


def size_bytes(number: str, unit: str) -> int:
    return int(round(float(number) * UNITS[unit.lower()]))


def _first_size(pattern: re.Pattern[str], text: str) -> int | None:
    m = pattern.search(text)
    if m is None:
        return None
    groups = [g for g in m.groups() if g is not None]
    return size_bytes(groups[0], groups[1]) if len(groups) >= 2 else None


def parse_oom(message: Any) -> dict[str, Any]:
    """The numbers in an OOM message; None for each one it does not say. ``processes``: the
    processes it names (pid, bytes), as PyTorch listed them (it lists those it can see)."""
    text = str(message)[:MAX_MESSAGE]
    out: dict[str, Any] = {name: _first_size(p, text) for name, p in _PATTERNS.items()}
    gpu = _GPU.search(text)
    out["gpu"] = int(gpu.group(1)) if gpu else None
    out["processes"] = [{"pid": int(m.group(1)), "used_memory_bytes": size_bytes(m.group(2), m.group(3))}
                        for m in _PROCESS.finditer(text)][:64]
    if out["reserved_unallocated_bytes"] is None and out["reserved_bytes"] is not None \
            and out["allocated_bytes"] is not None:
        out["reserved_unallocated_bytes"] = max(0, out["reserved_bytes"] - out["allocated_bytes"])  # older form
    return out
