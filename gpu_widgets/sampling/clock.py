"""Time for the sampler, behind a seam so tests can drive it without sleeping."""
from __future__ import annotations

import threading
import time


class Clock:
    """Real time: monotonic for scheduling, wall time for timestamps."""

    def monotonic(self) -> float:
        return time.monotonic()

    def wall(self) -> float:
        return time.time()

    def wait(self, event: threading.Event, timeout: float) -> bool:
        """Sleep up to ``timeout`` seconds; True as soon as ``event`` is set."""
        return event.wait(timeout)


def next_deadline(start: float, interval: float, now: float) -> tuple[float, int]:
    """The next tick strictly after ``now`` on the grid ``start + k * interval``.

    Returns (deadline, k). Ticks are never scheduled relative to the previous one, so the
    time spent sampling does not accumulate as drift; a tick that overran skips the missed
    grid points instead of firing a burst to catch up.
    """
    k = int((now - start) // interval) + 1
    return start + k * interval, k
