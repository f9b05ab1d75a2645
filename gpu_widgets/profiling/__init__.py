"""Why the GPU is not busy: a profile of a few training steps, read into one verdict and its evidence.

``analyze_trace(path)`` reads a trace that ``torch.profiler`` exported (Chrome-trace JSON, as
``export_chrome_trace`` and ``tensorboard_trace_handler`` write it, gzipped or not) and returns a
``Profile``; ``TrainingMonitor.profile()`` and ``%%gpuwatch --profile`` profile live steps and end
in the same analysis (docs/profile.md).
"""
from __future__ import annotations

import os
from collections.abc import Iterable, Mapping
from typing import Any

from .analysis import analyze
from .result import Profile, ProfileError
from .trace_file import TraceError, read_trace

VERDICTS = ("input-bound", "sync-bound", "copy-bound", "launch-bound", "fp32-matmul", "compute-bound")


def analyze_trace(path: str | os.PathLike, *, data_wait_s: float | None = None,
                  gpu_rows: Iterable[Mapping[str, Any]] = ()) -> Profile:
    """The verdict on a profiler trace file. ``data_wait_s``: the seconds the profiled steps waited
    for data, when known from elsewhere (the monitor); ``gpu_rows``: NVML samples of the same
    window (a run log's gpu.jsonl rows), for the clocks and the SM and tensor activity."""
    trace = read_trace(path)
    profile = analyze(trace, data_wait_s=data_wait_s, gpu_rows=gpu_rows)
    profile.trace_path = os.fspath(path)
    return profile


__all__ = ["VERDICTS", "Profile", "ProfileError", "TraceError", "analyze", "analyze_trace", "read_trace"]
