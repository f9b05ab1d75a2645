"""``%%gpuwatch --profile`` and ``--memory``: the cell's profile (or allocator recording) started
before it runs and shown after its summary.

The profiler and the analysis are profiling/'s (cell_profile.py); here only what the magic does
with them: a profile that cannot start (no PyTorch, another profiler running) is one line and the
cell runs unprofiled; one that cannot be read is one line too; neither ever hides the cell's own
exception. The results are ``_gpuwatch_profile`` and ``_gpuwatch_memory`` in the user's namespace.
A recording that cannot start (no CUDA) says why in one line, and the cell runs unrecorded.
"""
from __future__ import annotations

import sys
from typing import Any

from ..memory.recording import MemoryRecording
from ..profiling.cell_profile import CellProfile
from ..profiling.result import ProfileError
from ..runs.gpu_trace import GpuTrace
from ..widgets.header_css import HEADER_CSS


def cell_profile(wanted: bool) -> CellProfile | None:
    """A started profile of the cell about to run, or None (not asked, or it could not start)."""
    if not wanted:
        return None
    profiler = CellProfile()
    try:
        profiler.start()
    except ProfileError as exc:
        print(f"gpuwatch: no profile: {exc}", file=sys.stderr)
        return None
    return profiler


def show_profile(shell: Any, profiler: CellProfile, trace: GpuTrace, in_kernel: bool) -> None:
    try:
        profile = profiler.finish(trace.rows())
    except (OSError, ValueError, ProfileError) as exc:  # TraceError is a ValueError
        print(f"gpuwatch: the profile could not be read: {exc}", file=sys.stderr)
        return
    shell.user_ns["_gpuwatch_profile"] = profile
    text = f"%%gpuwatch --profile: {profile.verdict}: {profile.sentence}"
    if in_kernel:
        from IPython.display import display

        # the monitor's header classes, so the result reads like the summary above it
        html = f'<style>{HEADER_CSS}</style><div class="gpuw-h">{profile.html()}</div>'
        display({"text/plain": text, "text/html": html}, raw=True)
    else:
        print(text)


def cell_recording(wanted: bool) -> MemoryRecording | None:
    """A started recording of the cell's allocations, or None (not asked, or no CUDA: said why)."""
    if not wanted:
        return None
    recording = MemoryRecording(None)  # a cell has no run directory: the view is in the notebook
    why = recording.start()
    if why is not None:
        print(f"gpuwatch: --memory: {why}", file=sys.stderr)
        return None
    return recording


def show_recording(shell: Any, recording: MemoryRecording, in_kernel: bool) -> None:
    view = recording.stop()
    if view is None:
        print(f"gpuwatch: --memory: {recording.problem or 'nothing was recorded'}", file=sys.stderr)
        return
    shell.user_ns["_gpuwatch_memory"] = view
    if in_kernel:
        from IPython.display import display

        display(view)
    else:
        print(view.summary)
