"""The post-mortem of a CUDA out-of-memory error: what was asked and free, who else holds the GPU,
what this process holds, the cause in plain words, and what to do next.

Made from three sources, each optional: PyTorch's message (``oom_message.parse_oom``), NVML's
process list for that GPU (a recent sample of this process's sampler), and PyTorch's allocator for
this process (only when CUDA is initialised). Never raises: a part that cannot be read is left out.
Other users' processes show their pid and memory only, as everywhere in gpu-widgets.
"""
from __future__ import annotations

import os
import re
import sys
from dataclasses import dataclass, field
from html import escape
from typing import Any

from .kernel_notebooks import notebook_paths
from .oom_message import parse_oom

MARGIN = 0.10  # of the GPU, kept free in the batch estimate (the monitor's batch advice keeps the same)
OTHERS_SHARE = 0.20  # other processes holding this much of the GPU are the cause
FRAGMENT_SHARE = 0.05  # reserved-but-unallocated past this share of the GPU: the fragmentation hint
_KERNEL = re.compile(r"kernel-([0-9a-f-]{8,})\.json")
FACTS = ("gpu", "requested_bytes", "free_bytes", "total_bytes", "allocated_bytes", "reserved_unallocated_bytes")


def is_oom(exc: BaseException | None) -> bool:
    """A CUDA out-of-memory error (torch.OutOfMemoryError, alias torch.cuda.OutOfMemoryError)."""
    if exc is None:
        return False
    cls = getattr(sys.modules.get("torch"), "OutOfMemoryError", None)
    return isinstance(exc, cls) if isinstance(cls, type) else type(exc).__name__ == "OutOfMemoryError"


def gib(n: float | None) -> str:
    if n is None:
        return "unknown"
    if n >= 1 << 40:  # a request gone wrong (a size computed in the wrong unit) reads as one
        return f"{n / (1 << 40):.2f} TiB"
    return f"{n / (1 << 30):.2f} GiB" if n >= 1 << 30 else f"{n / (1 << 20):.0f} MiB"


@dataclass
class PostMortem:
    facts: dict[str, Any]  # mon.oom: the FACTS, "others", and this process's allocator figures
    cause: str
    lines: list[str] = field(default_factory=list)  # the rest, in order
    fits_batch: int | None = None

    def text(self) -> str:
        return "\n".join([f"gpu-widgets: out of memory — {self.cause}", *("  " + line for line in self.lines)])

    def html(self) -> str:
        items = "".join(f"<li>{escape(line)}</li>" for line in self.lines)
        return (f'<div class="gpuw-oom" role="alert"><div class="gpuw-htitle">Out of GPU memory</div>'
                f"<div><b>{escape(self.cause)}</b></div><ul>{items}</ul></div>")


def _nvml_index(cuda_index: int | None, snapshot: dict[str, Any] | None) -> int | None:
    """PyTorch numbers the GPUs CUDA sees; NVML all of them (CUDA_VISIBLE_DEVICES between)."""
    if cuda_index is None:
        return None
    visible = (snapshot or {}).get("cuda_visible_devices")
    if isinstance(visible, list) and 0 <= cuda_index < len(visible):
        return visible[cuda_index]
    return cuda_index


def _others(snapshot: dict[str, Any] | None, index: int | None) -> list[dict[str, Any]]:
    if snapshot is None or index is None:
        return []
    device = next((d for d in snapshot.get("devices", ()) if d.get("index") == index), None)
    me, uid = os.getpid(), os.getuid()
    out = []
    for p in (device or {}).get("processes") or ():
        if not isinstance(p, dict) or p.get("pid") == me:
            continue
        memory = p.get("used_memory_bytes")
        why = p.get("unavailable") if isinstance(p.get("unavailable"), dict) else {}
        unknown = why.get("used_memory_bytes")
        if not isinstance(memory, int) and not (p.get("pid") is not None and unknown):
            continue  # no figure and no reason: nothing to say about it
        entry: dict[str, Any] = {"pid": p.get("pid"), "used_memory_bytes": memory if isinstance(memory, int) else None}
        if unknown and not isinstance(memory, int):
            entry["memory_unknown"] = unknown  # in a container, where the driver's counts do not decide it
        if p.get("pid") is None:  # the driver's (host) pid names it: outside, or not told apart from ours
            entry["nvml_pid"] = p.get("nvml_pid")
            entry["told_apart"] = not str(why.get("name") or "").startswith("not told apart")
        if p.get("uid") == uid:  # our own user's: what it is (other users' stay pid and memory)
            command = p.get("command")
            kernel = _KERNEL.search(command) if isinstance(command, str) else None
            entry.update(name=p.get("name"), kernel_id=kernel.group(1) if kernel else None, notebook=None)
        out.append(entry)
    paths = notebook_paths(e["kernel_id"] for e in out if e.get("kernel_id"))
    for entry in out:
        if entry.get("kernel_id") in paths:
            entry["notebook"] = paths[entry["kernel_id"]]
    return sorted(out, key=lambda e: -(e["used_memory_bytes"] or 0))


def _pid(p: dict[str, Any]) -> str:
    """"pid 4242", or for an entry of the driver's with no local process (a container) its host pid."""
    if p.get("pid") is None:
        if p.get("told_apart") is False:
            return f"host pid {p.get('nvml_pid')}, not told apart from this container's processes"
        return f"outside this container (host pid {p.get('nvml_pid')})"
    return f"pid {p['pid']}"


def _blamed(others: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The entries whose memory is surely another process's: not those the driver's host pids leave
    untold (one may be this very process) nor those of unknown memory."""
    return [p for p in others if p.get("told_apart", True) and p["used_memory_bytes"] is not None]


def _who(p: dict[str, Any]) -> str | None:
    """A kernel of ours as a person knows it: its notebook, else its kernel id."""
    if p.get("notebook"):
        return f"the notebook {p['notebook']}"
    return f"Jupyter kernel {p['kernel_id'][:8]}" if p.get("kernel_id") else None


def _allocator(cuda_index: int | None) -> dict[str, Any]:
    torch = sys.modules.get("torch")
    cuda = getattr(torch, "cuda", None)
    try:
        if cuda is None or cuda_index is None or not cuda.is_initialized():
            return {}
        return {"this_allocated_bytes": cuda.memory_allocated(cuda_index),
                "this_reserved_bytes": cuda.memory_reserved(cuda_index),
                "this_peak_bytes": cuda.max_memory_allocated(cuda_index)}
    except Exception:  # a broken CUDA context: the message's figures still stand
        return {}


def post_mortem(exc: BaseException, snapshot: dict[str, Any] | None = None, batch_size: int | None = None,
                fixed_bytes: float | None = None) -> PostMortem:
    """``snapshot``: a recent sample (its processes); ``batch_size`` and ``fixed_bytes`` (memory that
    does not grow with the batch) from a monitor, for the batch that would have fit."""
    parsed = parse_oom(str(exc))
    facts: dict[str, Any] = {k: parsed[k] for k in FACTS}
    index = _nvml_index(parsed["gpu"], snapshot)
    facts["nvml_index"] = index
    facts["others"] = _others(snapshot, index)
    if not facts["others"] and parsed["processes"]:  # PyTorch named them; NVML could not be read
        facts["others"] = [p for p in parsed["processes"] if p["pid"] != os.getpid()]
    facts.update(_allocator(parsed["gpu"]))
    req, free, total = facts["requested_bytes"], facts["free_bytes"], facts["total_bytes"]
    blamed = _blamed(facts["others"])
    others_bytes = sum(p["used_memory_bytes"] for p in blamed)
    unalloc = facts["reserved_unallocated_bytes"]
    where = f"GPU {parsed['gpu']}" if parsed["gpu"] is not None else "the GPU"
    lines = [f"{where}: asked for {gib(req)}, {gib(free)} was free of {gib(total)}."]
    fits = None
    simulated = (snapshot or {}).get("backend") == "simulated"
    if unalloc and req and unalloc >= req:  # first: the memory was there, whoever else holds the GPU
        cause = (f"fragmentation: PyTorch holds {gib(unalloc)} reserved but unallocated, enough for the "
                 f"{gib(req)} asked for, but not in one piece")
    elif req and total and req > total:
        cause = (f"the step asked for {gib(req)}, more than all of {where}'s {gib(total)}: a size computed "
                 "wrong (a shape, a unit), or work meant for a larger GPU or for several")
    elif blamed and total and others_bytes >= max(req or 0, OTHERS_SHARE * total):
        top = blamed[0]
        who, name = _who(top) or "another process", top.get("name")
        detail = f"{_pid(top)}, {name}" if name and not _who(top) else _pid(top)
        cause = f"{who} ({detail}) holds {gib(top['used_memory_bytes'])} of {where}"
        if len(blamed) > 1:
            cause += f"; with the others, {gib(others_bytes)}"
    else:
        cause = "this process's own tensors fill the GPU: what this step needed does not fit"
        fits = _fits(batch_size, fixed_bytes, facts, others_bytes)
        if fits is not None:
            cause += f"; the batch that fits is about {fits} (it was {batch_size})"
    alloc = facts.get("this_allocated_bytes", facts["allocated_bytes"])
    if alloc is not None:
        mine = f"This process: {gib(alloc)} allocated by PyTorch"
        if facts.get("this_reserved_bytes") is not None:
            mine += f", {gib(facts['this_reserved_bytes'])} reserved, peak {gib(facts['this_peak_bytes'])}"
        elif unalloc is not None:
            mine += f", {gib(unalloc)} more reserved but unallocated"
        lines.append(mine + ".")
    for p in facts["others"][:8]:
        what = _who(p) or p.get("name") or "another user's process (details hidden)"
        made_up = " (a SIMULATED process: these GPUs are not real)" if simulated else ""
        held = p["memory_unknown"] if p.get("memory_unknown") else gib(p["used_memory_bytes"])
        named = _pid(p) if p.get("pid") is None else f"{_pid(p)} · {what}"  # a host pid: nothing more known
        lines.append(f"Also on {where}: {named} · {held}{made_up}.")
    if unalloc and total and (unalloc >= FRAGMENT_SHARE * total or cause.startswith("fragmentation")):
        lines.append(f"{gib(unalloc)} is reserved but unallocated: PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True "
                     "lets PyTorch reuse it (set it before CUDA starts: in the kernel's environment or the "
                     "notebook's first cell).")
    lines.append("Free memory without restarting: gpu_widgets.free_gpu_memory() or %gpu_free (drops what the "
                 "failed cell keeps; your own names stay).")
    return PostMortem(facts, cause, lines, fits)


def _fits(batch_size: int | None, fixed: float | None, facts: dict[str, Any], others: int) -> int | None:
    """The batch that would have fit. This step needed what PyTorch had allocated plus what it
    asked for; less ``fixed`` (weights, optimizer state), that grows with the batch. What PyTorch
    could have had: allocated + reserved-unallocated + free (the message's own figures), else the
    GPU less others' memory; less a margin of the GPU."""
    alloc, req, total = facts.get("allocated_bytes"), facts.get("requested_bytes"), facts.get("total_bytes")
    if not batch_size or alloc is None or req is None or not total:
        return None
    free, unalloc = facts.get("free_bytes"), facts.get("reserved_unallocated_bytes") or 0
    capacity = alloc + unalloc + free if free is not None else total - others
    fixed = fixed or 0.0
    per_sample = (alloc + req - fixed) / batch_size
    usable = capacity - MARGIN * total - fixed
    if per_sample <= 0 or usable <= 0:
        return None
    n = int(usable // per_sample)
    return n if 0 < n < batch_size else None
