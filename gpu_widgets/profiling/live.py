"""A live profile of a few training steps: ``torch.profiler`` started and stopped at the loop's
step boundaries, the trace analysed off the loop.

``ProfileSession.step()`` runs on the training thread at each step boundary. While waiting it is
an int compare; it skips ``warmup`` steps, starts the profiler (its own warm-up step: the first
step it sees is discarded, as torch.profiler's schedule does), records ``steps`` steps (each a
``ProfilerStep#N`` span, from ``prof.step()``), and stops it: that, and the start, are the only
costs the loop pays (the first start in a process: about a second; a stop: the profiler collecting
its events, ~0.3 s for 20,000 ops). Exporting the trace and analysing it run on a daemon thread,
which fills in the pending ``Profile`` and calls ``on_done``. The analysis itself (pure Python,
seconds for a trace of thousands of ops a step) runs in a child process: on a thread it holds the
GIL, and a loop of small ops, which releases and retakes the GIL at each op, ran 10 times slower
meanwhile. Nothing here raises into the loop: a failure is the profile's (``Profile.failed``).
``cancel()`` stops a profiler the run left running.
"""
from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Iterable, Mapping
from pathlib import Path
from typing import Any

from . import kineto
from .analysis import analyze
from .result import Profile, ProfileError
from .trace_file import read_trace

MAX_STEPS = 1000  # a trace of more steps (with stacks) runs to gigabytes
WAITING, STARTING, PROFILING, STOPPED = 0, 1, 2, 3  # the session's phase (the Profile's status follows)


def checked_steps(steps: Any, warmup: Any) -> tuple[int, int]:
    """``profile(steps, warmup=...)``: whole numbers, 1 <= steps <= MAX_STEPS, warmup >= 0."""
    for name, v in (("steps", steps), ("warmup", warmup)):
        if isinstance(v, bool) or not isinstance(v, int):
            raise TypeError(f"profile({name}=...) takes a whole number of steps, got {type(v).__name__} {v!r}")
    if not 1 <= steps <= MAX_STEPS:
        raise ValueError(f"profile(steps={steps!r}): profile between 1 and {MAX_STEPS} steps "
                         "(a few tens are enough for a verdict)")
    if warmup < 0:
        raise ValueError(f"profile(warmup={warmup!r}): the steps to skip first must be 0 or more")
    return steps, warmup


def torch_profiler() -> Any:
    try:
        import torch.profiler
    except ImportError:
        raise ProfileError("a profile needs PyTorch (torch.profiler): pip install torch") from None
    return torch


ANALYSIS_TIMEOUT_S = 300.0


def analyse_apart(path: Path, data_wait_s: float | None, rows: list[Mapping[str, Any]]) -> Profile:
    """``analyze_trace`` in a child Python (off this process's GIL); in this process where no
    child can be started."""
    args = json.dumps({"path": str(path), "data_wait_s": data_wait_s, "gpu_rows": rows}, default=str)
    try:
        done = subprocess.run([sys.executable, "-m", __name__], input=args, capture_output=True, text=True,
                              timeout=ANALYSIS_TIMEOUT_S, env={**os.environ, "PYTHONPATH": _package_root()})
    except (OSError, subprocess.SubprocessError):
        return analyse_file(path, data_wait_s, rows)
    if done.returncode != 0:
        lines = (done.stderr or "").strip().splitlines()
        raise ProfileError(lines[-1] if lines else f"the analysis exited with {done.returncode}")
    fields = json.loads(done.stdout)
    fields.pop("status", None), fields.pop("error", None)
    return Profile(**fields)


def _package_root() -> str:
    """The folder the package is imported from, first on the child's path (then the user's)."""
    root = str(Path(__file__).resolve().parents[2])
    rest = os.environ.get("PYTHONPATH")
    return root + (os.pathsep + rest if rest else "")


def analyse_file(path: str | os.PathLike, data_wait_s: float | None, rows: Iterable[Mapping[str, Any]]) -> Profile:
    profile = analyze(read_trace(path), data_wait_s=data_wait_s, gpu_rows=rows)
    profile.trace_path = os.fspath(path)
    return profile


def _child() -> None:
    args = json.loads(sys.stdin.read())
    profile = analyse_file(args["path"], args["data_wait_s"], args["gpu_rows"])
    json.dump(profile.as_dict(), sys.stdout)


class ProfileSession:
    """One profile of ``steps`` steps after ``warmup`` skipped ones (see the module's docstring).

    ``data_wait``: the run's cumulative data-wait seconds (read at the start and end of the
    profiled steps: their ``data_wait_s``); ``gpu_rows(t0, t1)``: the NVML rows of the profiled
    window (epoch seconds); ``keep_trace``: the trace stays in ``trace_dir`` (a folder, or a callable
    that gives one when the trace is written; a temp directory when None) as
    ``profile-<k>.pt.trace.json``; otherwise it is deleted once read."""

    _count = 0
    _count_lock = threading.Lock()

    def __init__(self, steps: int, *, warmup: int = 2, keep_trace: bool = False,
                 trace_dir: str | os.PathLike | None = None, data_wait: Callable[[], float] | None = None,
                 gpu_rows: Callable[[float, float], Iterable[Mapping[str, Any]]] | None = None,
                 on_done: Callable[[Profile], None] | None = None) -> None:
        self.steps, self.warmup = checked_steps(steps, warmup)
        self.torch = torch_profiler()
        self.keep_trace = bool(keep_trace)
        self.trace_dir = trace_dir  # a folder, or a callable giving one (None: none) when the trace is written
        self.data_wait, self.gpu_rows, self.on_done = data_wait, gpu_rows, on_done
        self.profile = Profile(status="waiting", steps=self.steps)
        with ProfileSession._count_lock:
            ProfileSession._count += 1
            self.number = ProfileSession._count
        self.phase = WAITING
        self.seen = 0  # step boundaries seen
        self.start_at = self.warmup  # the boundary that starts the profiler ...
        self.record_at = self.warmup + 1  # ... the one its recording starts at ...
        self.stop_at = self.record_at + self.steps  # ... and the one that ends it
        self.prof: Any = None
        self.lock = threading.Lock()  # step() against cancel() from another thread
        self.window = [0.0, 0.0]  # epoch seconds of the recorded steps
        self.waited = [0.0, 0.0]  # the run's cumulative data wait then
        self.thread: threading.Thread | None = None

    @property
    def done(self) -> bool:
        return self.phase == STOPPED

    @property
    def recorded(self) -> int:
        """Profiled steps completed so far."""
        return max(0, min(self.seen - 1, self.stop_at) - self.record_at)

    def step(self) -> None:
        """A step boundary, on the training thread. Never raises."""
        self.seen += 1
        n = self.seen - 1  # this boundary's number, from 0
        if n < self.start_at or self.phase == STOPPED:
            return
        with self.lock:
            if self.phase == STOPPED:
                return
            try:
                if n == self.start_at:
                    self._start()
                elif n == self.record_at:
                    self._mark(0)
                    self.prof.step()
                    self.phase, self.profile.status = PROFILING, "profiling"
                elif n < self.stop_at:
                    self.prof.step()
                elif n == self.stop_at:
                    self.prof.step()  # the schedule's last active step ends: the profiler stops
                    self._mark(1)
                    self._stop()
                    self._hand_off()
            except ProfileError as exc:
                self._abandon(f"the profile could not start: {exc}")
            except Exception as exc:  # the profiler refused: the profile fails, the loop goes on
                self._abandon(f"torch.profiler failed: {type(exc).__name__}: {exc}")

    def cancel(self, why: str | None = None) -> None:
        """The run ended before the profiled steps were done: stop a running profiler, fail."""
        with self.lock:
            if self.phase == STOPPED:
                return
            why = why or f"the run ended after {self.recorded} of {self.steps} profiled steps"
            self._abandon(why)

    # -- the training thread ----------------------------------------------------------------------
    def _start(self) -> None:
        torch = self.torch
        if kineto.running():  # stopping ours would stop theirs: never start beside it
            raise ProfileError("another torch.profiler runs in this process; profile once it stopped")
        kineto.quiet()
        acts = [torch.profiler.ProfilerActivity.CPU]
        if torch.cuda.is_available() and torch.cuda.is_initialized():  # a process that uses a GPU
            acts.append(torch.profiler.ProfilerActivity.CUDA)
        prof = torch.profiler.profile(activities=acts, with_stack=True,
                                      schedule=torch.profiler.schedule(wait=0, warmup=1, active=self.steps, repeat=1))
        self.phase = STARTING
        prof.start()
        self.prof = prof

    def _mark(self, i: int) -> None:
        self.window[i] = time.time()
        if self.data_wait is not None:
            try:
                self.waited[i] = float(self.data_wait())
            except Exception:  # no data wait known: the trace's own DataLoader spans decide
                self.data_wait = None

    def _stop(self) -> None:
        prof = self.prof
        prof.stop()  # the schedule stopped it already; this only closes the schedule
        self.phase, self.profile.status = STOPPED, "analysing"

    def _abandon(self, why: str) -> None:
        prof, self.prof = self.prof, None
        self.phase = STOPPED
        if prof is not None:
            try:
                prof.stop()
            except Exception:  # stopped already, or torch refuses twice: nothing is left running
                pass
        self._finish(None, why)

    def _hand_off(self) -> None:
        self.thread = threading.Thread(target=self._analyse, name="gpu-widgets-profile", daemon=True)
        self.thread.start()

    # -- the daemon thread ------------------------------------------------------------------------
    def _analyse(self) -> None:
        prof, self.prof = self.prof, None
        tmp = None
        try:
            where = self.trace_dir() if callable(self.trace_dir) else self.trace_dir
            if self.keep_trace and where is not None:
                folder = Path(where)
                folder.mkdir(parents=True, exist_ok=True)
            else:
                folder = Path(tmp := tempfile.mkdtemp(prefix="gpu-widgets-profile-"))
            path = folder / f"profile-{self.number}.pt.trace.json"
            prof.export_chrome_trace(str(path))
            wait = self.waited[1] - self.waited[0] if self.data_wait is not None else None
            rows = list(self.gpu_rows(*self.window)) if self.gpu_rows is not None else []
            result = analyse_apart(path, wait, rows)
            if self.keep_trace:
                tmp = None  # kept: a temp directory only when the run has none (trace_path says where)
            else:
                result.trace_path = None
            self._finish(result, None)
        except Exception as exc:
            self._finish(None, f"the trace could not be analysed: {type(exc).__name__}: {exc}")
        finally:
            if tmp is not None:
                shutil.rmtree(tmp, ignore_errors=True)

    def _finish(self, result: Profile | None, why: str | None) -> None:
        # wait() returns only once on_done has run: a caller that waited sees the announcement and
        # last_profile, not a race with this thread
        if result is not None:
            self.profile.fill(result, settle=False)
        else:
            self.profile.failed(why or "unknown", settle=False)
        try:
            if self.on_done is not None:
                self.on_done(self.profile)
        except Exception:  # the monitor's side showing it: never the loop's problem
            pass
        finally:
            self.profile.settle()


if __name__ == "__main__":  # analyse_apart's child
    _child()
