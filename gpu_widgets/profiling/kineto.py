"""Kineto (torch.profiler's engine) writes its stage markers ("USDT: ... profiler_start") straight
to the process's stderr, which a notebook shows under the cell being profiled. Its level is read
from ``KINETO_LOG_LEVEL`` when the profiler first starts in a process: past all of its levels
unless the user chose one (its errors still reach Python as exceptions)."""
from __future__ import annotations

import os

QUIET = "6"


def quiet() -> None:
    os.environ.setdefault("KINETO_LOG_LEVEL", QUIET)
