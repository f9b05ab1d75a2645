"""What gpu-widgets asks of Kineto, torch.profiler's engine: whether a profiler records in this
process now (``running``), and quiet (``quiet``).

Kineto writes its stage markers ("USDT: ... profiler_start") straight
to the process's stderr, which a notebook shows under the cell being profiled. Its level is read
from ``KINETO_LOG_LEVEL`` when the profiler first starts in a process: past all of its levels
unless the user chose one (its errors still reach Python as exceptions)."""
from __future__ import annotations

import os

QUIET = "6"


def quiet() -> None:
    os.environ.setdefault("KINETO_LOG_LEVEL", QUIET)


def running() -> bool:
    """Whether a torch.profiler (or the autograd profiler) records in this process now: starting
    another would silently take its place, so neither trace would be whole."""
    import torch

    return bool(torch.autograd._profiler_enabled())
