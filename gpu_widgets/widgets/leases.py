"""Leases on the process-wide sampler, so its threads run only while a widget needs them.

Monitors, dashboards and ``%%gpuwatch`` cells take a lease while they watch. The first lease
starts the shared sampler; when the last one is returned, the sampler is stopped again, unless
something else had started it before (then it is not ours to stop).
"""
from __future__ import annotations

import threading


from ..sampling.sampler import ConfigError, Sampler, get_sampler
from ..sampling.stall import STALE, stale_text

_lock = threading.Lock()
_holders = 0
_started_here = False


def acquire(interval_s: float | None = None) -> Sampler:
    """The shared sampler, running (at ``interval_s`` when given: for the whole process).

    Raises ConfigError for bad backend settings.
    """
    global _holders, _started_here
    with _lock:
        sampler = get_sampler(start=False)
        if _holders == 0:
            _started_here = not sampler.running
        if interval_s is not None:
            faster = interval_s < sampler.interval_s
            sampler.interval_s = interval_s
            if faster and sampler.running:
                # A running sampler would first sleep out its old, longer interval.
                sampler.stop(timeout=2.0)
        sampler.start()
        _holders += 1
        return sampler


def release(sampler: Sampler) -> None:
    global _holders, _started_here
    with _lock:
        _holders = max(0, _holders - 1)
        if _holders == 0 and _started_here:
            _started_here = False
            sampler.stop(timeout=2.0)


def holders() -> int:
    return _holders


def freshness(sampler: Sampler | None, status: str | None, reason: str | None) -> tuple[str | None, str | None]:
    """The ``status`` and ``reason`` a widget shows with its newest sample: as given, or
    ``("stale", "no new sample for 12 s: <the call it waits on>")`` when the sampler is stuck.
    Asked on the widget's own timer: a stuck sampler sends no more samples to react to."""
    if sampler is None:
        return status, reason
    age, why = sampler.staleness()
    return (STALE, stale_text(age, why)) if why is not None else (status, reason)


__all__ = ["ConfigError", "acquire", "freshness", "holders", "release"]
