"""Times in alert messages: a clock time with its zone, and a duration people read at a glance.

The zone is written out because the server's clock and the reader's may differ (a server in a
UTC container, a browser elsewhere); the episode's ``start`` and ``end`` carry the exact times.
"""
from __future__ import annotations

import time


def clock(t: float) -> str:
    """``14:02:11 UTC`` in the server's local zone (with the date when it is not today)."""
    local = time.localtime(t)
    today = time.localtime()
    day = "" if local[:3] == today[:3] else time.strftime("%Y-%m-%d ", local)
    return f"{day}{time.strftime('%H:%M:%S', local)} {time.strftime('%Z', local) or 'local time'}".rstrip()


def duration(seconds: float) -> str:
    """``45 s``, ``2 min 49 s``, ``3 h 05 min``."""
    s = max(0, int(round(seconds)))
    if s < 60:
        return f"{s} s"
    if s < 3600:
        return f"{s // 60} min {s % 60:02d} s"
    return f"{s // 3600} h {s % 3600 // 60:02d} min"
