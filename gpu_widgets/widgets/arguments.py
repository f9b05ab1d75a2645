"""Checks of what users pass to the monitor: each error names the argument and what it accepts."""
from __future__ import annotations

from collections.abc import Mapping
from typing import Any


def positive_int(name: str, value: Any) -> int | None:
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int) or value <= 0:
        raise ValueError(f"{name} must be a positive whole number (or None), got {value!r}")
    return value


def number_in(name: str, value: Any, lo: float, hi: float) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not lo < value <= hi:
        raise ValueError(f"{name} must be a number in ({lo:g}, {hi:g}], got {value!r}")
    return float(value)


MAX_STEP = 2**63 - 1  # steps live in an array("q")


def checked_step(step: Any, values: dict[str, Any]) -> tuple[int, dict[str, Any]]:
    """A log() step that is not a plain non-negative int: -1 means "the next step"."""
    if isinstance(step, Mapping):  # log({"loss": 0.3}) reads naturally too
        values = {**step, **values}
        step = values.pop("step", None)
        if step is None:
            return -1, values
    if isinstance(step, bool) or not hasattr(step, "__index__"):
        raise TypeError(
            f"log(step=...) must be a whole number, got {type(step).__name__} {step!r}; "
            "pass values as keywords: log(loss=0.3) or log(step, loss=0.3)"
        )
    step = step.__index__()  # NumPy and tensor integers
    if step < 0:
        raise ValueError(f"log(step={step}): steps start at 0")
    if step > MAX_STEP:
        raise ValueError(f"log(step={step}): steps are stored as 64-bit ints, at most {MAX_STEP}")
    return step, values
