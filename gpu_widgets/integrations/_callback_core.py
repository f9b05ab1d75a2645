"""What the framework callbacks share: one TrainingMonitor fed from a framework's hooks.

A framework module only translates its hooks into the calls below (``begin``, ``epoch``,
``batch_started``, ``batch_ended``, ``log``, ``end``); the monitor's lifecycle, the choice of
values, the rank rule and the one line printed outside a notebook live here, the same for all.

The rank rule: under torch.distributed (``RANK`` / ``WORLD_SIZE``, or an initialised process group)
every rank records, into its launch's one directory (monitor/run_launch.py), and rank 0 alone
displays; otherwise (one process, or ranks torch does not know of) the framework's process 0 alone.

Batch hooks stamp ``time.perf_counter()`` at the start and end of each step: the time between one
step's end and the next one's start is what the loop spent waiting for data (all three frameworks
fetch the batch before their batch-start hook). Each step goes to ``note_data_wait`` (the wait, and
the wait + the previous step's own time). Not counted: the first step of an epoch (the loader
starting up), and time the framework spent on its own work between two steps (validation,
checkpoints, logging: the callback calls ``restart_wait()`` after it).
"""
from __future__ import annotations

import atexit
import inspect
import math
import sys
import weakref
from time import perf_counter
from collections.abc import Mapping
from typing import Any

from ..monitor.batches import batch_size_of
from ..widgets.cell_hooks import in_kernel
from ..monitor.monitor import TrainingMonitor
from ..monitor.run_launch import other_rank, this_rank
from ..monitor.run_state import now as wall_now

_active: "weakref.WeakSet[MonitorFeed]" = weakref.WeakSet()  # feeds between begin() and end()

def check_options(monitor: Any, options: dict[str, Any], owner: str) -> None:
    """Fail at construction, not at the first step, on arguments TrainingMonitor would refuse."""
    if monitor is not None:
        if not isinstance(monitor, TrainingMonitor):
            raise TypeError(f"{owner}(monitor=...) takes a gpu_widgets.TrainingMonitor, got {type(monitor).__name__}")
        if options:
            raise TypeError(f"{owner}: pass either monitor= or TrainingMonitor's keyword arguments, not both "
                            f"(got monitor= and {sorted(options)})")
        return
    try:
        inspect.signature(TrainingMonitor).bind(**options)
    except TypeError as exc:
        raise TypeError(f"{owner}: keyword arguments go to TrainingMonitor, which refuses them: {exc}") from None


def records_here(process_zero: bool) -> bool:
    """Whether this process records: every rank of a torch.distributed launch, else the
    framework's process 0 alone (``process_zero``)."""
    return process_zero or this_rank() is not None


def number(value: Any) -> Any | None:
    """``value`` as TrainingMonitor.log() takes it, or None: a real number; a one-element torch
    tensor left unread (the monitor reads it off the loop's thread, so a GPU tensor costs the
    loop no wait); any other one-element array (NumPy, JAX, TensorFlow) as a float."""
    if isinstance(value, bool):
        return None
    if isinstance(value, (int, float)):
        return value
    if getattr(value, "shape", None) is None:
        return None
    try:
        if hasattr(value, "detach") and hasattr(value, "numel"):  # torch
            return value.detach() if value.numel() == 1 and not value.is_complex() else None
        if int(getattr(value, "size", 0)) != 1:
            return None
        x = value.item() if hasattr(value, "item") else float(value)
        return x if isinstance(x, (int, float)) and not isinstance(x, bool) else None  # not complex
    except (TypeError, ValueError):  # not a number at all
        return None


def numbers(values: Mapping[str, Any], skip: tuple[str, ...] = ()) -> dict[str, Any]:
    """The loggable entries of a framework's metrics dict (strings, lists and the like dropped)."""
    out = {}
    for key, value in values.items():
        if isinstance(key, str) and key not in skip and (v := number(value)) is not None:
            out[key] = v
    return out


class MonitorFeed:
    """One callback's TrainingMonitor, and the calls the callback's hooks make into it."""

    def __init__(self, monitor: TrainingMonitor | None, options: dict[str, Any], owner: str) -> None:
        check_options(monitor, options, owner)
        self._monitor = monitor
        self._given = monitor is not None
        self._options = options
        self.owner = owner
        self.active = False  # between begin() and end() on this process
        self._unannounced = False  # a run began and its directory was not printed yet
        self.step_started: float | None = None  # perf_counter at the current step's start
        self.step_ended: float | None = None  # and at the previous step's end
        self.step_busy: float | None = None  # the previous step, start to end
        self._add_wait: Any = None  # the monitor's recorders, from begin()
        self._add_samples: Any = None
        self._beat: Any = None  # the monitor's Heartbeat, from begin()
        self._timing: Any = None  # the monitor's RankTiming, from begin(): its forward timer
        self._steps: Any = None  # the monitor's ProfileSlot, from begin(): each batch a profile's step

    @property
    def monitor(self) -> TrainingMonitor:
        """Created on first use: only a process that records (``records_here``) makes one."""
        if self._monitor is None:
            self._monitor = TrainingMonitor(**self._options)
        return self._monitor

    # -- the run's lifecycle ----------------------------------------------------------------------
    def begin(self, total_steps: int | None = None, model: Any = None) -> None:
        """Training starts. A monitor of ours that an earlier run ended is replaced by a new one:
        each run its own run log. A given monitor resumes, unless it finished (it cannot log again).
        ``model``: the framework's torch module, whose forward the monitor times."""
        mon = self.monitor
        if self.active and mon.status == "running":
            # The previous run raised where this framework has no hook to tell us: it failed.
            mon.fail(RuntimeError("the previous training run stopped without reaching its end"))
        if not self._given and mon.status in ("finished", "failed", "interrupted"):
            self._monitor = None
            mon = self.monitor
        elif mon.status == "finished":
            raise RuntimeError(f"{self.owner}: the TrainingMonitor given as monitor= has finished; "
                               "pass a new TrainingMonitor() for another run")
        self.active = True
        _active.add(self)
        self.step_started = self.step_ended = self.step_busy = None
        self._unannounced = True
        self.set_total(total_steps)
        if model is not None:
            try:
                mon.watch_model(model)
            except TypeError:  # not a torch module: its forward is not timed, training goes on
                pass
        self._timing = mon.parts.timing
        self._leave_steps()  # a run that never reached end(): its batch loop is over
        self._steps = mon.parts.steps
        self._steps.batch_loops += 1  # its log() calls are not profile steps: its batches are
        self._beat = self._timing.beat  # the rank's phase, for its heartbeat
        mon.__enter__()  # the run (its clock, GPU sampling, run log) starts with training, not at step 1
        # Every step passes here: the monitor's own recorders, without the checks its public
        # note_data_wait() / note_batch() make on values from a user (ours are always sound).
        self._add_wait, self._add_samples = mon.recorders()

    def set_total(self, total_steps: int | None) -> None:
        """The run's optimizer steps, when the framework knows them (None or 0: unknown, kept)."""
        if total_steps is not None and total_steps > 0:
            self.monitor.total_steps = int(total_steps)

    def epoch(self, epoch: int, epochs: int | None) -> None:
        """``epoch`` counted from 1, as shown; ``epochs`` the total, when known and sensible."""
        total = int(epochs) if epochs is not None and math.isfinite(epochs) and epochs >= max(epoch, 1) else None
        self.monitor.set_epoch(int(epoch), total)
        self.step_ended = None  # the epoch's first batch waits for the loader to start: not counted

    def restart_wait(self) -> None:
        """The framework did its own work since the last step (validation, a checkpoint, logging):
        the next step's wait is counted from now."""
        if self.step_ended is not None:
            self.step_ended = perf_counter()

    def batch_started(self) -> None:
        now = self.step_started = perf_counter()
        self._beat.state, self._beat.step_started = ("forward", now), now  # has its batch
        ended, busy = self.step_ended, self.step_busy
        if ended is not None and busy is not None and now >= ended:
            wait = now - ended
            self._add_wait(wait, wait + busy, ended)
        steps = self._steps
        if steps is not None and steps.wanted:
            steps.batch()  # a profile's step ends as the next batch starts

    def forward_began(self, module: Any) -> None:
        """The framework calls the step's forward itself, where no module hook sees it (Lightning's
        ``training_step``): it is timed from here to ``forward_ended()``."""
        timer = self._timing.timer
        if timer is not None:
            timer.enter(module)

    def forward_ended(self, module: Any) -> None:
        """The step's forward returned (its loss is about to go backward); idempotent."""
        timer = self._timing.timer
        if timer is not None:
            timer.leave(module)

    def batch_ended(self, batch: Any = None, samples: int | None = None) -> None:
        """One batch done: its samples counted (from ``samples``, else read from ``batch``)."""
        ended = self.step_ended = perf_counter()
        self._beat.state = ("data", ended)  # the framework fetches the next batch now
        if self.step_started is not None:
            self.step_busy = ended - self.step_started
        if samples is None and batch is not None:
            samples = batch_size_of(batch)
        if samples is not None:
            self._add_samples(samples, wall_now())
        if self._unannounced:
            self.announce()

    def log(self, step: int | None, values: Mapping[str, Any]) -> None:
        if values:
            self.monitor.log(step, **values)

    def end(self, error: BaseException | None = None, step: int | None = None) -> None:
        """Training ended: finished (no error), interrupted (KeyboardInterrupt) or failed. The
        error is only recorded: the framework raises it on, unchanged. ``step``, the last step
        done, is logged (with no values) when the framework's logging rhythm skipped it, so the
        header counts every step."""
        if not self.active:
            return
        self.active = False
        _active.discard(self)
        self._leave_steps()
        mon = self.monitor
        last = mon.step
        if step is not None and step >= 0 and (last is None or step > last) and mon.status == "running":
            mon.log(step)
        self.announce()
        if error is None:
            mon.finish()
        elif isinstance(error, KeyboardInterrupt):
            mon.interrupt()
        else:
            mon.fail(error)

    def _leave_steps(self) -> None:
        if self._steps is not None:
            self._steps.batch_loops -= 1
            self._steps = None

    def announce(self) -> None:
        """Outside a notebook nothing is shown: one line says where the run log is, once per run."""
        run_dir = self.monitor.run_dir
        if run_dir is None or not self._unannounced:
            return  # no run log, or not written yet (the monitor's thread makes the directory)
        self._unannounced = False
        if in_kernel() or other_rank():
            return  # a rank other than 0 printed its own line (run_launch)
        print(f"gpu-widgets: recording this run in {run_dir}", file=sys.stderr, flush=True)


@atexit.register
def _end_at_exit() -> None:
    # Trainers without an exception hook (transformers, Keras) never tell us that a script died
    # on an exception. Python keeps it in sys.last_value for exit handlers, and this one runs
    # before TrainingMonitor's (registered later, run first). In IPython the cell hooks ended the
    # run already: only a monitor still running is ended here.
    error = getattr(sys, "last_value", None)
    for feed in list(_active):
        if feed._monitor is not None and feed._monitor.status == "running":
            feed.end(error)
