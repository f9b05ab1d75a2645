"""``%%gpuwatch --profile``: the cell's profile started before it runs and shown after its summary.

The profiler and the analysis are profiling/'s (cell_profile.py); here only what the magic does
with them: a profile that cannot start (no PyTorch, another profiler running) is one line and the
cell runs unprofiled; one that cannot be read is one line too; neither ever hides the cell's own
exception. The result is ``_gpuwatch_profile`` in the user's namespace.
"""
from __future__ import annotations

import sys
from typing import Any

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
