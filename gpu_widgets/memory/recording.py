"""Recording PyTorch's allocator history for a few steps (``mon.record_memory``) or a cell
(``%%gpuwatch --memory``), then drawing it (snapshot_view.py) and keeping it beside the run.

``torch.cuda.memory._record_memory_history`` records each allocation and free with its stack, at
most MAX_ENTRIES of them (PyTorch keeps the newest); stopping takes ``_snapshot()`` and turns the
recording off, so nothing is recorded, or costs anything, after. Without CUDA (no torch, a CPU
build, no GPU) there is no allocator to record: ``start()`` returns the reason as a sentence and
records nothing; the loop or the cell runs on. The snapshot is written as a pickle of plain data
(what ``_dump_snapshot`` writes, readable by PyTorch's own viewer and by ``show_memory_snapshot``)
with the PNG beside it.
"""
from __future__ import annotations

import pickle
import sys
import time
from pathlib import Path
from typing import Any, Callable

MAX_ENTRIES = 200_000  # trace entries kept: a few hundred steps of a mid-sized model (~100 MB pickled)


def why_not_recordable() -> str | None:
    """Why no allocator history can be recorded in this process, or None when it can."""
    torch = sys.modules.get("torch")
    if torch is None:
        try:
            import torch  # noqa: F811 (asked for explicitly: the user wants a recording)
        except ImportError:
            return "no CUDA allocator to record: PyTorch is not installed"
    cuda = getattr(torch, "cuda", None)
    if cuda is None or not cuda.is_available():
        build = getattr(getattr(torch, "version", None), "cuda", None)
        what = "a CPU build of PyTorch" if build is None else "no CUDA GPU visible to PyTorch"
        return f"no CUDA allocator to record: {what} ({torch.__version__}); nothing was recorded"
    if not hasattr(cuda.memory, "_record_memory_history"):
        return f"this PyTorch ({torch.__version__}) cannot record its allocator's history (needs 2.1 or newer)"
    return None


class MemoryRecording:
    """One recording: ``start()``, then ``stop()`` (idempotent) gives the snapshot's view."""

    def __init__(self, where: Path | None | Callable[[], Path | None], name: str = "memory") -> None:
        """``where``: the directory to keep the snapshot in (None: not kept), or a callable that
        gives it when the recording stops (a run's directory may appear after the call)."""
        self.where, self.name = where, name
        self.running = False
        self.path: Path | None = None  # the snapshot's pickle, once written
        self.problem: str | None = None

    def start(self) -> str | None:
        why = why_not_recordable()
        if why is not None:
            self.problem = why
            return why
        import torch

        torch.cuda.memory._record_memory_history(max_entries=MAX_ENTRIES)
        self.running = True
        return None

    def stop(self) -> Any:
        """The MemorySnapshot of what was recorded (None when nothing was); never raises."""
        if not self.running:
            return None
        self.running = False
        import torch

        try:
            snapshot = torch.cuda.memory._snapshot()
        except Exception as exc:
            self.problem = f"the recording could not be read: {type(exc).__name__}: {exc}"
            return None
        finally:
            try:
                torch.cuda.memory._record_memory_history(enabled=None)  # off: nothing recorded after
            except Exception:
                pass
        from .snapshot_view import show_memory_snapshot

        try:
            view = show_memory_snapshot(snapshot, display=False)
        except ValueError as exc:  # an empty recording (no allocation in those steps)
            self.problem = str(exc)
            return None
        where = self.where() if callable(self.where) else self.where
        if where is not None:
            try:
                where = Path(where)
                where.mkdir(parents=True, exist_ok=True)
                stem = f"{self.name}-{time.strftime('%Y%m%d-%H%M%S')}"
                self.path = where / f"{stem}.pickle"
                with open(self.path, "wb") as f:
                    pickle.dump(snapshot, f, protocol=4)
                view.to_png(where / f"{stem}.png")
            except OSError as exc:
                self.problem = f"the snapshot was not saved ({exc})"
        return view
