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


def check_monitor(title: Any, x_axis: Any, max_points: Any, sampler: Any, saved_run: Any) -> None:
    """TrainingMonitor's arguments that are checked but not converted."""
    from ..runs.saved_run import SavedRun
    from ..sampling.sampler import Sampler

    if title is not None and not isinstance(title, str):
        raise TypeError(f"title must be a string, got {type(title).__name__}")
    if x_axis not in ("time", "step"):
        raise ValueError(f"x_axis must be 'time' or 'step', got {x_axis!r}")
    if isinstance(max_points, bool) or not isinstance(max_points, int) or not 4 <= max_points <= 100_000:
        raise ValueError(f"max_points must be a whole number from 4 to 100000, got {max_points!r}")
    if sampler is not None and not isinstance(sampler, Sampler):
        raise TypeError(f"sampler must be a gpu_widgets.sampling.sampler.Sampler, got {type(sampler).__name__}")
    if saved_run is not None and not isinstance(saved_run, SavedRun):
        raise TypeError(f"saved_run must be a SavedRun (see TrainingMonitor.load), got {type(saved_run).__name__}")


def checked_epochs(iterable: Any, epochs: Any) -> int:
    """``track(iterable, epochs)``: a positive number of passes over something that can be
    iterated that many times."""
    epochs = positive_int("epochs", epochs)
    if epochs is None:
        raise ValueError("epochs must be a positive whole number, got None")
    if epochs > 1 and iter(iterable) is iterable:
        raise ValueError(
            f"track(..., epochs={epochs}) needs something that can be iterated again (a DataLoader, a list), "
            "not an iterator or generator: it would be empty after the first epoch"
        )
    return epochs


def checked_epoch(epoch: Any, epochs: Any, before: int | None) -> tuple[int, int | None]:
    """``set_epoch(epoch, epochs)``: epoch 0 or more, epochs positive (None: the total ``before``)."""
    if isinstance(epoch, bool) or not isinstance(epoch, int) or epoch < 0:
        raise ValueError(f"epoch must be a whole number, 0 or more, got {epoch!r}")
    epochs = positive_int("epochs", epochs) or before
    if epochs is not None and epoch > epochs:
        raise ValueError(f"set_epoch({epoch}, epochs={epochs}): the epoch is past the last one")
    return epoch, epochs
