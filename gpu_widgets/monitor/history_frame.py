"""``TrainingMonitor.history`` and ``to_pandas()``: the logged rows as a DataFrame that reads well.

``time`` (seconds since the epoch, as logged and as the files hold it) prints as ``1.796348e+09``
in a DataFrame, which says nothing. So the frame leads with ``elapsed_s`` (seconds since the run's
start, what the charts' time axis shows) and ``wall_time`` (a UTC timestamp, to the millisecond), then the keys, and
keeps the exact ``time`` last. A key logged under one of those names keeps its name and its values:
the derived column is left out.
"""
from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

DERIVED = ("elapsed_s", "wall_time")


def history_frame(rows: list[dict[str, Any]], keys: Sequence[str], started: float | None) -> Any:
    try:
        import pandas as pd
    except ImportError:
        raise ImportError("to_pandas() needs pandas: pip install pandas") from None
    frame = pd.DataFrame(rows, columns=["step", "time", *keys])
    times = frame["time"].astype(float)
    if started is None or not math.isfinite(started):
        started = times.min() if times.notna().any() else 0.0
    derived = {"elapsed_s": times - started, "wall_time": pd.to_datetime(times, unit="s", utc=True).dt.round("ms")}
    for name in DERIVED:
        if name in keys:
            del derived[name]
    columns = ["step", *derived, *keys, "time"]
    return frame.assign(**derived)[columns]
