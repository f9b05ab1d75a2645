"""``free_gpu_memory()``: give back the memory a failed cell keeps, without restarting the kernel.

After an exception the memory of the failed step stays held: ``sys.last_value`` /
``sys.last_traceback`` / ``sys.last_exc`` keep the traceback, whose frames keep their locals (the
batch, the activations); IPython keeps the traceback for ``%debug`` and every cell's result in its
output cache (``Out``, ``_``, ``__``, ``___``, ``_<n>``). This drops exactly those references —
the traceback's function frames are cleared, cached outputs that hold tensors are removed — then
collects garbage and empties PyTorch's CUDA cache. The user's own names are never deleted: those
that hold large tensors, modules or optimizers are named in the report as not touched.
"""
from __future__ import annotations

import gc
import os
import sys
import time
import types
import weakref
from dataclasses import dataclass, field
from html import escape
from typing import Any

LARGE = 1 << 20  # a name holding less than 1 MiB of tensors is not worth naming
MAX_SCAN = 10_000  # objects looked into per container walk: a huge list is not walked whole
IPYTHON_OUTPUTS = ("_", "__", "___")
NVML_WAIT_S = 5.0  # at most, for a process list read after the memory was given back (read at once)


@dataclass
class FreeReport:
    dropped: list[str] = field(default_factory=list)  # what references were dropped
    tensor_bytes_freed: int = 0  # bytes of the tensors those references held that are gone now
    rss_before: int | None = None
    rss_after: int | None = None
    gpu: list[dict[str, Any]] = field(default_factory=list)  # per CUDA device: allocator and driver, before/after
    nvml: list[dict[str, Any]] = field(default_factory=list)  # per GPU: this process's memory in NVML, before/after
    not_touched: list[dict[str, Any]] = field(default_factory=list)  # {name, bytes, what}

    @property
    def rss_freed(self) -> int | None:
        if self.rss_before is None or self.rss_after is None:
            return None
        return self.rss_before - self.rss_after

    def lines(self) -> list[str]:
        out = [f"dropped: {', '.join(self.dropped)}" if self.dropped else "nothing held by a failed cell to drop"]
        out.append(f"tensors freed: {_size(self.tensor_bytes_freed)}"
                   + (f"; this process's memory (RSS) {_size(self.rss_before)} → {_size(self.rss_after)}"
                      if self.rss_before is not None and self.rss_after is not None else ""))
        for d in self.gpu:
            out.append(f"GPU {d['device']}: PyTorch reserved {_size(d['reserved_before'])} → {_size(d['reserved_after'])}, "
                       f"free on the GPU {_size(d['free_before'])} → {_size(d['free_after'])}")
        for d in self.nvml:
            out.append(f"GPU {d['gpu']} (NVML): this process held {_size(d['before'])} → {_size(d['after'])}")
        for n in self.not_touched:
            out.append(f"not touched: `{n['name']}` still holds {_size(n['bytes'])} ({n['what']})")
        return out

    def __str__(self) -> str:
        return "gpu-widgets: free_gpu_memory: " + "\n  ".join(self.lines())

    def __repr__(self) -> str:
        return str(self)

    def _repr_html_(self) -> str:
        items = "".join(f"<li>{escape(line)}</li>" for line in self.lines())
        return f'<div class="gpuw-free"><b>free_gpu_memory()</b><ul>{items}</ul></div>'


def _size(n: int | None) -> str:
    if n is None:
        return "unknown"
    sign, n = ("-" if n < 0 else ""), abs(n)
    for unit, scale in (("GiB", 1 << 30), ("MiB", 1 << 20), ("KiB", 1 << 10)):
        if n >= scale:
            return f"{sign}{n / scale:.1f} {unit}"
    return f"{sign}{n} B"


def _torch() -> Any:
    return sys.modules.get("torch")  # never imported here: no torch in the process, no tensors


def _tensors(value: Any, torch: Any, budget: list[int], depth: int = 0) -> list[Any]:
    """The tensors ``value`` holds: itself, or inside lists, tuples, dicts, sets (a few levels)."""
    if budget[0] <= 0 or depth > 3:
        return []
    budget[0] -= 1
    if torch.is_tensor(value):
        return [value]
    if isinstance(value, dict):
        return [t for v in list(value.values())[:MAX_SCAN] for t in _tensors(v, torch, budget, depth + 1)]
    if isinstance(value, (list, tuple, set, frozenset)):
        return [t for v in list(value)[:MAX_SCAN] for t in _tensors(v, torch, budget, depth + 1)]
    return []


def _held(value: Any, torch: Any) -> tuple[int, str] | None:
    """Bytes of tensors a user's name holds, and what it is (a tensor, a module, an optimizer...)."""
    nn = getattr(torch, "nn", None)
    if nn is not None and isinstance(value, nn.Module):
        tensors = list(value.parameters()) + list(value.buffers())
        what = f"a {type(value).__name__} module"
    elif isinstance(value, getattr(getattr(torch, "optim", None), "Optimizer", ())):
        tensors = [t for s in value.state.values() for t in _tensors(s, torch, [MAX_SCAN])]
        what = f"a {type(value).__name__} optimizer's state"
    else:
        tensors = _tensors(value, torch, [MAX_SCAN])
        what = "a tensor" if len(tensors) == 1 and torch.is_tensor(value) else f"{len(tensors)} tensors"
    total = _nbytes(tensors)
    if total < LARGE:
        return None
    devices = sorted({str(t.device) for t in tensors})
    return total, f"{what} on {', '.join(devices)}"


def _nbytes(tensors: list[Any]) -> int:
    seen, total = set(), 0
    for t in tensors:
        try:
            storage = t.untyped_storage()
            key = (storage.data_ptr(), str(t.device))
            if key not in seen:
                seen.add(key)
                total += storage.nbytes()
        except (RuntimeError, AttributeError):  # a meta or sparse tensor: its own size
            total += t.element_size() * t.nelement()
    return total


def _rss() -> int | None:
    try:
        import psutil

        return psutil.Process(os.getpid()).memory_info().rss
    except Exception:
        return None


def _gpu_state(torch: Any) -> list[dict[str, Any]]:
    cuda = getattr(torch, "cuda", None)
    if cuda is None or not cuda.is_initialized():
        return []
    out = []
    for d in range(cuda.device_count()):
        free, total = cuda.mem_get_info(d)
        out.append({"device": d, "reserved": cuda.memory_reserved(d), "allocated": cuda.memory_allocated(d),
                    "free": free, "total": total})
    return out


def _exceptions(shell: Any) -> list[BaseException]:
    """The last exception and those chained to it (cause, context), each once."""
    first = getattr(sys, "last_exc", None) or getattr(sys, "last_value", None)
    out: list[BaseException] = []
    stack = [first] if isinstance(first, BaseException) else []
    while stack and len(out) < 100:
        e = stack.pop()
        if e is None or any(e is o for o in out):
            continue
        out.append(e)
        stack.extend([e.__cause__, e.__context__])
    return out


def _clear_frames(exc: BaseException, user_ns: dict[str, Any] | None) -> int:
    """Clear the locals of the traceback's finished function frames (never a module's frame: its
    locals are the user's namespace)."""
    cleared = 0
    tb = exc.__traceback__
    while tb is not None:
        frame = tb.tb_frame
        if frame.f_locals is not frame.f_globals and frame.f_locals is not user_ns:
            try:
                frame.clear()
                cleared += 1
            except RuntimeError:  # still running (this very call's callers): left alone
                pass
        tb = tb.tb_next
    return cleared


def free_gpu_memory(shell: Any = None) -> FreeReport:
    """Drop what a failed cell keeps alive, collect it, and give the GPU memory back (see module)."""
    torch = _torch()
    if shell is None:
        try:
            from IPython import get_ipython

            shell = get_ipython()
        except ImportError:
            shell = None
    user_ns = getattr(shell, "user_ns", None)
    report = FreeReport(rss_before=_rss())
    before = _gpu_state(torch) if torch is not None else []
    nvml_before = _nvml_own() if before else {}  # a process with CUDA running has GPU memory to give
    watched: dict[Any, tuple[list[weakref.ref], int]] = {}  # storage -> (refs to its tensors, bytes)

    def watch(value: Any) -> None:
        if torch is None:
            return
        for t in _tensors(value, torch, [MAX_SCAN]):
            try:
                key = (t.untyped_storage().data_ptr(), str(t.device))
                refs, size = watched.setdefault(key, ([], _nbytes([t])))
                refs.append(weakref.ref(t))
            except (TypeError, RuntimeError):
                pass

    report.dropped.extend(_drop_references(shell, user_ns, torch, watch))
    del watch
    gc.collect()
    if torch is not None and getattr(torch, "cuda", None) is not None and torch.cuda.is_initialized():
        torch.cuda.empty_cache()
    report.tensor_bytes_freed = sum(size for refs, size in watched.values() if all(r() is None for r in refs))
    report.rss_after = _rss()
    after = {d["device"]: d for d in (_gpu_state(torch) if torch is not None else [])}
    report.gpu = [{"device": d["device"], "reserved_before": d["reserved"], "reserved_after": after[d["device"]]["reserved"],
                   "free_before": d["free"], "free_after": after[d["device"]]["free"]}
                  for d in before if d["device"] in after]
    if nvml_before:
        from .recent_sample import own_gpu_memory, recent_snapshot

        freed_at = time.time()
        after_nvml = own_gpu_memory(recent_snapshot(newer_than=freed_at, wait_s=NVML_WAIT_S, processes=True))
        report.nvml = [{"gpu": g, "before": b, "after": after_nvml.get(g, 0)} for g, b in sorted(nvml_before.items())]
    if torch is not None and user_ns is not None:
        report.not_touched = _not_touched(user_ns, torch)
    return report


def _nvml_own() -> dict[int, int]:
    try:
        from .recent_sample import own_gpu_memory, recent_snapshot

        return own_gpu_memory(recent_snapshot())
    except Exception:  # NVML's view is extra: the allocator's and the driver's are reported anyway
        return {}


def _drop_references(shell: Any, user_ns: dict[str, Any] | None, torch: Any, watch: Any) -> list[str]:
    """Drop the references (in a function of its own: its loop variables, which hold the frames
    and values it walks, are gone when it returns, before the collection)."""
    dropped, frames = [], 0
    for exc in _exceptions(shell):
        tb = exc.__traceback__
        while tb is not None:
            f = tb.tb_frame
            if f.f_locals is not f.f_globals and f.f_locals is not user_ns:
                for v in list(f.f_locals.values()):
                    watch(v)
            tb = tb.tb_next
        frames += _clear_frames(exc, user_ns)
        exc.__traceback__ = None
    if frames:
        dropped.append(f"{frames} traceback frame{'s' if frames != 1 else ''}")
    for name in ("last_value", "last_traceback", "last_type", "last_exc"):
        if getattr(sys, name, None) is not None:
            setattr(sys, name, None)
            dropped.append(f"sys.{name}")
    if shell is not None:
        dropped.extend(_drop_ipython(shell, torch, watch))
    return dropped


def _drop_ipython(shell: Any, torch: Any, watch: Any) -> list[str]:
    dropped = []
    itb = getattr(shell, "InteractiveTB", None)
    if getattr(itb, "tb", None) is not None:  # kept for %debug
        itb.tb = None
        dropped.append("IPython's last traceback (%debug)")
    if torch is None:
        return dropped
    ns, hidden = shell.user_ns, getattr(shell, "user_ns_hidden", {})
    spaces = [d for d in (ns, getattr(shell, "user_global_ns", None), hidden) if isinstance(d, dict)]
    out = ns.get("Out")
    if isinstance(out, dict):
        gone = [k for k, v in list(out.items()) if _tensors(v, torch, [MAX_SCAN])]
        for k in gone:
            watch(out[k])
            del out[k]
            for space in spaces:  # IPython's _<n>: the same output under its number
                space.pop(f"_{k}", None)
        if gone:
            dropped.append("Out[" + ", ".join(map(str, gone)) + "]")
    last = getattr(shell, "last_execution_result", None)
    if last is not None and _tensors(getattr(last, "result", None), torch, [MAX_SCAN]):
        watch(last.result)
        last.result = None  # the last cell's value, kept by IPython beside Out
        dropped.append("the last cell's result")
    hook = getattr(shell, "displayhook", None)
    for key in IPYTHON_OUTPUTS:  # in the namespaces and on the display hook, which keeps them too
        held = [d for d in spaces if key in d and _tensors(d[key], torch, [MAX_SCAN])]
        on_hook = hook is not None and _tensors(getattr(hook, key, None), torch, [MAX_SCAN])
        for d in held:
            watch(d[key])
            d[key] = ""  # as IPython's own %reset out leaves them
        if on_hook:
            setattr(hook, key, "")
        if held or on_hook:
            dropped.append(key)
    return dropped


def _not_touched(user_ns: dict[str, Any], torch: Any) -> list[dict[str, Any]]:
    hidden = {"In", "Out", "exit", "quit", "get_ipython"}
    found = []
    for name, value in list(user_ns.items()):
        if name.startswith("_") or name in hidden or isinstance(value, (types.ModuleType, type)):
            continue
        held = _held(value, torch)
        if held is not None:
            found.append({"name": name, "bytes": held[0], "what": held[1]})
    return sorted(found, key=lambda n: -n["bytes"])[:10]
