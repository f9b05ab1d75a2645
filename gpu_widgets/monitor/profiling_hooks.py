"""``TrainingMonitor.profile()``: a torch.profiler profile of the loop's next steps, its verdict
shown in the monitor's widget (gpu_widgets.profiling, docs/profile.md).

Steps are counted at the loop's step boundaries: each batch of ``track()``, each batch the framework
callbacks start (MonitorFeed.batch_started), else each ``log()`` call. A loop that goes through
``track()`` or a callback also logs: its ``log()`` calls are not boundaries while a batch loop is in
progress (``batch_loops``), so no step is counted twice. When no profile is pending a boundary
costs one attribute read. The run stopping (finish, fail, interrupt, a cell's end) cancels a
pending profile: its profiler is stopped and the profile fails, saying after how many steps.
"""
from __future__ import annotations

import sys
import threading
import time
from typing import Any

from ..profiling import cell_profile
from ..widgets.cell_hooks import in_kernel
from .memory_hooks import MemoryHooks, own_loop
from .run_state import State

WAIT_SAMPLE_S = 1.5  # the analysis waits at most this for the GPU sample after the window (1 Hz sampling)


class ProfileSlot:
    """One run's profile: the pending session, the last result, its place in the widget
    (MonitorRun.steps)."""

    def __init__(self, view: Any) -> None:
        self.session: Any = None  # the pending profiling.live.ProfileSession
        self.memory: Any = None  # a pending memory_hooks.MemorySteps
        self.batch_loops = 0  # track() iterations and callback runs in progress: log() is no boundary
        self.last: Any = None  # the latest done or failed Profile
        self.view = view
        self.html: Any = None  # the HTML widget under the header, made by the first profile()
        self.shown: tuple[Any, str] | None = None  # (profile, status) the widget shows
        self.lock = threading.Lock()

    @property
    def wanted(self) -> bool:
        """Whether a boundary does anything now: a pending profile, or a ``%%gpuwatch --profile``
        cell (what the loop checks at each step before calling ``batch()`` / ``logged()``)."""
        return self.session is not None or self.memory is not None or cell_profile._active is not None

    def batch(self) -> None:
        """A batch boundary (track(), a callback): the training thread. It also marks a step of a
        ``%%gpuwatch --profile`` cell that runs this loop."""
        session, memory = self.session, self.memory
        if session is not None:
            session.step()
        if memory is not None:
            memory.step()
        if cell_profile._active is not None:
            cell_profile.tick()

    def logged(self) -> None:
        """A log() call: a boundary only in a loop that has no batch boundaries."""
        if not self.batch_loops:
            self.batch()

    def ended(self) -> None:
        """The run stopped: a profile still waiting for, or in, its steps fails; a memory recording
        ends with what it has."""
        session, memory = self.session, self.memory
        if session is not None:
            session.cancel()
        if memory is not None:
            memory.finish()

    def show(self) -> None:
        """The widget's HTML follows the profile's status (the monitor's thread, and on_done)."""
        html, session = self.html, self.session
        profile = session.profile if session is not None else self.last
        if html is None or profile is None or self.shown == (profile, profile.status):
            return
        self.shown = (profile, profile.status)
        html.value = profile.html()

    def place(self) -> None:
        """The HTML widget, under the header, from the first profile on."""
        if self.html is not None:
            return
        from ipywidgets import HTML

        self.html = HTML(value="")
        self.html.add_class("gpuw-profile-box")
        box = self.view.widget
        children = list(box.children)
        box.children = (children[0], self.html, *children[1:])

    def html_value(self) -> str:
        """What the static output shows under the header once the run stopped."""
        return self.html.value if self.html is not None else ""


class ProfileHooks(MemoryHooks):
    """TrainingMonitor's ``profile()`` and ``last_profile`` (kept here: monitor.py has a line budget),
    and through MemoryHooks its ``record_memory()``, ``last_memory`` and ``oom``."""

    _r: Any
    run_dir: Any

    def profile(self, steps: int = 20, *, warmup: int = 2, keep_trace: bool = False) -> Any:
        """Profile the loop's next ``steps`` steps with torch.profiler (CPU, and CUDA where this
        process uses a GPU), after skipping ``warmup`` steps and one more the profiler warms up on.
        Returns a pending :class:`gpu_widgets.profiling.Profile` at once; the loop goes on. When the
        steps are done it fills in (``wait()``), is ``last_profile``, and shows in the widget (outside
        a notebook, one line on stderr). ``keep_trace``: the trace stays in the run directory
        (``trace_path``; a temp directory for a run without a run log), for Perfetto or TensorBoard.
        One profile at a time. Steps: ``track()``'s batches, a framework callback's, else ``log()`` calls."""
        from ..profiling.live import ProfileSession, checked_steps

        checked_steps(steps, warmup)
        r = self._r
        own_loop(r, "profile()", "profiles", "profile")
        slot = r.steps
        with slot.lock:
            if slot.session is not None:
                raise RuntimeError(f"a profile is already pending ({slot.session.profile!r}); one at a time: "
                                   "wait for it (profile.wait(), or mon.last_profile)")
            session = ProfileSession(steps, warmup=warmup, keep_trace=keep_trace, trace_dir=self._trace_dir,
                                     data_wait=lambda: r.charts.waits.waited, gpu_rows=self._window_rows,
                                     on_done=self._profiled)
            slot.session = session
        try:
            slot.place()
            slot.show()
        except Exception as exc:  # no widget (ipywidgets missing or closed): the result still comes
            r.run.problem(f"showing the profile: {type(exc).__name__}: {exc}")
        return session.profile

    @property
    def last_profile(self) -> Any:
        """The latest profile once done or failed (a :class:`gpu_widgets.profiling.Profile`), else None."""
        return self._r.steps.last

    def _trace_dir(self) -> Any:
        """The run directory, when the trace is written (the analysis thread): the monitor's thread
        makes it with the run's first rows, which a short profile can overtake."""
        r = self._r
        deadline = time.monotonic() + WAIT_SAMPLE_S
        while self.run_dir is None and r.res.run_log is not None and time.monotonic() < deadline:
            if r.run.state == State.RUNNING:
                r.tick(final=False)
            time.sleep(0.05)
        return self.run_dir

    def _window_rows(self, t0: float, t1: float) -> list[dict[str, Any]]:
        """The GPU samples of the profiled window; a sample covers the interval before it, so one
        up to a second after the window still speaks of it."""
        r = self._r
        deadline = time.monotonic() + WAIT_SAMPLE_S
        try:
            while True:
                running = r.run.state == State.RUNNING
                if running:
                    r.tick(final=False)  # the samples the sampler gave since the monitor's last pass
                rows = r.trace.rows("all", spilled=False)
                if not rows or not running or rows[-1].get("time", 0.0) >= t1 or time.monotonic() > deadline:
                    break
                time.sleep(0.1)  # the analysis thread: the sample that covers the window's end is due
        except Exception:  # the samples are the monitor's: none known is no reason to fail
            return []
        return [row for row in rows if t0 <= row.get("time", 0.0) <= t1 + 1.0]

    def _profiled(self, profile: Any) -> None:
        """The profile is done or failed (the analysis thread, or the loop's when it failed)."""
        r = self._r
        slot = r.steps
        with slot.lock:
            slot.last = profile
            if slot.session is not None and slot.session.profile is profile:
                slot.session = None
        r.run.guard("showing the profile", slot.show)
        if not r.live():
            r.update_output()  # the stopped run's picture: with the profile under its header
        if not in_kernel():
            n = profile.steps
            what = (f"{profile.verdict}: {profile.sentence}" if profile.status == "done"
                    else f"failed: {profile.error}")
            print(f"gpu-widgets: profile of {n} step{'s' if n != 1 else ''}: {what}", file=sys.stderr, flush=True)
