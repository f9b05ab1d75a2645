"""Leases on the process-wide sampler, so its threads run only while a widget needs them.

Monitors, dashboards and ``%%gpuwatch`` cells take a lease while they watch. The first lease
starts the shared sampler; when the last one is returned, the sampler is stopped again, unless
something else had started it before (then it is not ours to stop).

``GpmAsk`` is the other kind of lease: a watching widget asks its sampler for the GPM figures (SM
active, tensor active; Sampler.want_gpm), renewed on the widget's own timer and released when
it stops, so the GPU's performance counters are read only while someone looks.
"""
from __future__ import annotations

import itertools
import threading

from ..sampling.sampler import GPM_LEASE_S, ConfigError, Sampler, get_sampler
from ..sampling.stall import STALE, stale_text

_lock = threading.Lock()
_ids = itertools.count(1)
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


class GpmAsk:
    """One widget's GPM lease on one sampler. ``renew`` on each pass of the widget's timer (a
    lease outlives three periods, so a slow timer keeps it); ``release`` when the widget stops. A
    widget that dies without releasing stops costing anything when its lease runs out."""

    def __init__(self, kind: str) -> None:
        self.owner = f"{kind}:{next(_ids)}"  # one owner per widget: one stopping leaves the others'
        self.sampler: Sampler | None = None

    def renew(self, sampler: Sampler | None, period_s: float) -> None:
        if sampler is None:
            return
        if self.sampler is not None and self.sampler is not sampler:
            self.release()
        sampler.want_gpm(self.owner, lease_s=max(GPM_LEASE_S, 3 * period_s))
        self.sampler = sampler

    def hold(self, sampler: Sampler) -> None:
        """Until ``release``: for a watcher with no timer of its own (a ``%%gpuwatch`` cell, whose
        release is in a ``finally``)."""
        sampler.want_gpm(self.owner, lease_s=None)
        self.sampler = sampler

    def release(self) -> None:
        sampler, self.sampler = self.sampler, None
        if sampler is not None:
            sampler.release_gpm(self.owner)


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


__all__ = ["ConfigError", "GpmAsk", "acquire", "freshness", "holders", "release"]
