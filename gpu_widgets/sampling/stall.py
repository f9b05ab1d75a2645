"""Whether the newest sample is stale, and which call the sampler is waiting on.

A sampler thread stuck inside a driver call cannot report anything, so whoever reads a sample
(a request handler, a widget's timer, the CLI) works out its age at that moment. When it is
older than ``STALE_INTERVALS`` intervals the stuck thread's slot (backends/inflight.py) names
the call: the NVML backend writes the NVML function and the GPU there before each call, the
sampler the backend read or subscriber it is in. The slot is read only when a sample is already
stale.
"""
from __future__ import annotations

import threading
from typing import Any

from ..backends import inflight

STALE = "stale"
# A sample older than this many intervals is stale (one late tick is normal on a busy machine),
# and never sooner than MIN_STALE_S: at 0.1 s intervals, scheduling jitter alone reaches 0.3 s.
STALE_INTERVALS = 3
MIN_STALE_S = 2.0
# Before the first sample: opening NVML on a machine without persistence mode takes seconds.
STARTUP_GRACE_S = 5.0


def stale_after_s(interval_s: float, first: bool = False) -> float:
    """How old the newest sample (or, with ``first``, the wait for the first one) may get."""
    limit = max(STALE_INTERVALS * interval_s, MIN_STALE_S)
    return max(limit, STARTUP_GRACE_S) if first else limit


def waiting_on(thread: threading.Thread | None) -> str | None:
    """What ``thread`` is stuck in, in words ("nvmlDeviceGetPowerUsage on GPU 3 has not
    returned"); None when it is idle between two reads."""
    if thread is None or not thread.is_alive():
        return "the sampler thread stopped (see the log)"
    doing = inflight.of(thread)
    if doing is None:
        return None
    step, call, gpu = doing.step, doing.call, doing.gpu
    if call is None:
        if step is None:
            return None
        call = name_of(step)
    return f"{call}{'' if gpu is None else f' on GPU {gpu}'} has not returned"


def name_of(step: Any) -> str:
    """``module.Class.method`` of a callable: where its code is, as a traceback would say."""
    fn = getattr(step, "__func__", step)  # a bound method: the function, named by its own class
    qualname = getattr(fn, "__qualname__", None)
    if qualname is None:  # a callable object, a partial
        fn = type(step)
        qualname = f"{fn.__qualname__}.__call__"
    return f"{getattr(fn, '__module__', None) or '?'}.{qualname}"


def stale_text(age_s: float | None, reason: str | None) -> str:
    """One line for people: "no new sample for 12 s: <reason>"."""
    head = "no sample yet" if age_s is None else f"no new sample for {age_s:.0f} s"
    return f"{head}: {reason}" if reason else head
