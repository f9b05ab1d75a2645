"""Whether the newest sample is stale, and which call the sampler is waiting on.

A sampler thread stuck inside a driver call cannot report anything, so whoever reads a sample
(a request handler, a widget's timer, the CLI) works out its age at that moment. When it is
older than ``STALE_INTERVALS`` intervals the stuck thread's Python stack names the call: the
innermost pynvml frame holds the C function it entered, and the NVML backend's frame holds the
device (its local ``dev``). Nothing is recorded per call, so sampling costs nothing extra; the
stack is read only when a sample is already stale.
"""
from __future__ import annotations

import sys
import threading
from types import FrameType

STALE = "stale"
# A sample older than this many intervals is stale (one late tick is normal on a busy machine),
# and never sooner than MIN_STALE_S: at 0.1 s intervals, scheduling jitter alone reaches 0.3 s.
STALE_INTERVALS = 3
MIN_STALE_S = 2.0
# Before the first sample: opening NVML on a machine without persistence mode takes seconds.
STARTUP_GRACE_S = 5.0
# The sampler's loops between two reads: a thread waiting there is idle, not stuck.
_LOOPS = ("_fast_loop", "_slow_loop")


def stale_after_s(interval_s: float, first: bool = False) -> float:
    """How old the newest sample (or, with ``first``, the wait for the first one) may get."""
    limit = max(STALE_INTERVALS * interval_s, MIN_STALE_S)
    return max(limit, STARTUP_GRACE_S) if first else limit


def waiting_on(thread: threading.Thread | None) -> str | None:
    """What ``thread`` is stuck in, in words ("nvmlDeviceGetPowerUsage on GPU 3 has not
    returned"); None when it is idle between two reads."""
    if thread is None or not thread.is_alive():
        return "the sampler thread stopped (see the log)"
    frame = sys._current_frames().get(thread.ident) if thread.ident is not None else None
    if frame is None:
        return None
    call, gpu = _nvml_call(frame)
    if call is None:
        outer = _below_sampler(frame)
        if outer is None:
            return None
        call = _name(outer) if outer is frame else f"{_name(outer)} (in {_name(frame)})"
    return f"{call}{'' if gpu is None else f' on GPU {gpu}'} has not returned"


def _name(frame: FrameType) -> str:
    code = frame.f_code
    return f"{frame.f_globals.get('__name__', '?')}.{getattr(code, 'co_qualname', code.co_name)}"


def _below_sampler(frame: FrameType) -> FrameType | None:
    """The frame the sampler called (the backend's read, a subscriber); None when the sampler's
    loop is waiting for its next tick. On other threads: ``frame`` itself."""
    below: FrameType | None = None
    f: FrameType | None = frame
    while f is not None:
        if f.f_globals.get("__name__") == "gpu_widgets.sampling.sampler":
            return None if f.f_code.co_name in _LOOPS else below or f
        below, f = f, f.f_back
    return frame


def _nvml_call(frame: FrameType | None) -> tuple[str | None, int | None]:
    """(NVML function, GPU index) of the innermost NVML call on the stack from ``frame``."""
    call: str | None = None
    gpu: int | None = None
    while frame is not None:
        module = frame.f_globals.get("__name__")
        if call is None and module == "pynvml" and frame.f_code.co_name.startswith("nvml"):
            # The ctypes function pointer names the C entry point (nvmlDeviceGetMemoryInfo_v2).
            fn = frame.f_locals.get("fn")
            call = getattr(fn, "__name__", None) or frame.f_code.co_name
        elif call is not None and module == "gpu_widgets.backends.nvml.backend":
            index = getattr(frame.f_locals.get("dev"), "index", None)
            if isinstance(index, int):
                gpu = index
                break
        frame = frame.f_back
    return call, gpu


def stale_text(age_s: float | None, reason: str | None) -> str:
    """One line for people: "no new sample for 12 s: <reason>"."""
    head = "no sample yet" if age_s is None else f"no new sample for {age_s:.0f} s"
    return f"{head}: {reason}" if reason else head
