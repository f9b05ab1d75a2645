"""``gpu_widgets.launch(args)``: start a torchrun job from a notebook and follow it there.

The job is ``python -m torch.distributed.run <args>`` with the kernel's own Python, in a session
of its own (interrupting the kernel does not reach it), its output (torchrun's and every rank's)
in ``<launch>/torchrun.log``, never in the notebook. The launch directory is made here, before
anything starts, and handed to every rank in ``$GPU_WIDGETS_LAUNCH_DIR`` (parallel/rendezvous.py
takes it as it is), so the notebook knows where the ranks record without asking them. A thread
polls for rank 0's files and then follows the launch (``TrainingMonitor.follow``): the cell that
launched returns at once. In a notebook a status line, a Stop button and a "Show output" toggle
sit above the follower's charts.
"""
from __future__ import annotations

import contextlib
import html
import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

from ..parallel.rendezvous import LAUNCH_DIR_ENV
from ..parallel.torchrun_args import torchrun_args
from ..runs.launch_dir import rank_dir
from ..runs.run_log import ENV_DIR, META, default_root, run_name
from ..widgets import cell_hooks

LOG_NAME = "torchrun.log"
POLL_S = 0.25  # how often the thread looks for rank 0's files and at the job
MAX_TAIL_BYTES = 1 << 20  # output() reads at most this much of the log's end
MAX_TAIL_LINES = 10_000
FOLLOW_END_S = 10.0  # wait() waits this long at most for the follower to read the run's end
_POSIX = os.name == "posix"


def launch(args: Any, *, nproc_per_node: int | str | None = None, run_dir: str | os.PathLike | None = None,
           title: str | None = None, display: bool = True) -> "Launch":
    """Start ``python -m torch.distributed.run <args>`` in the background and follow it.

    ``args``: torchrun's arguments, then the script and its own (``["--nproc_per_node=2",
    "train.py", "--lr", "0.1"]``), or the script's path alone with ``nproc_per_node``. The ranks
    record under ``run_dir`` (default: the run root, ``$GPU_WIDGETS_RUN_DIR``), in a launch
    directory named after ``title`` (default: the script's name). Returns a :class:`Launch`; in
    a notebook (``display=True``) it shows itself, then the launch's charts once rank 0 records."""
    command, script = torchrun_args(args, nproc_per_node)
    if title is not None and not isinstance(title, str):
        raise TypeError(f"title is a string, got {type(title).__name__}")
    if run_dir is not None and not isinstance(run_dir, (str, os.PathLike)):
        raise TypeError(f"run_dir is a path, got {type(run_dir).__name__}")
    root = (Path(run_dir).expanduser() if run_dir is not None else default_root()).resolve()
    where = root / run_name(title or Path(script).stem)
    where.mkdir(parents=True)
    env = dict(os.environ)
    env[LAUNCH_DIR_ENV] = str(where)
    env[ENV_DIR] = str(root)  # the same root, spelled as the launch directory's parent
    env.setdefault("PYTHONUNBUFFERED", "1")  # the log shows what the ranks print when they print it
    if env.get("MPLBACKEND", "").startswith("module://matplotlib_inline"):
        del env["MPLBACKEND"]  # the kernel's inline backend: the ranks are not in a kernel
    with open(where / LOG_NAME, "ab") as log:
        extra: dict[str, Any] = ({"start_new_session": True} if _POSIX
                                 else {"creationflags": getattr(subprocess, "CREATE_NEW_PROCESS_GROUP", 0)})
        proc = subprocess.Popen([sys.executable, "-m", "torch.distributed.run", *command], env=env,
                                stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT, **extra)
    job = Launch(proc, where, command)
    if display and cell_hooks.in_kernel():
        job.show()
    job.start()
    return job


class Launch:
    """A torchrun job started by :func:`launch`: its directory, its output, and its monitor."""

    def __init__(self, proc: subprocess.Popen, run_dir: Path, args: list[str]) -> None:
        self._proc = proc
        self.run_dir = run_dir  # the launch directory: run.json and rank-<r>/ once the ranks record
        self.args = args
        self.pid = proc.pid
        self.notes: list[str] = []
        self._monitor: Any = None
        self._stopped = False
        self._lock = threading.Lock()  # stop(): one at a time
        self._view: _LaunchView | None = None
        self._thread = threading.Thread(target=self._watch, name="gpu-widgets-launch", daemon=True)

    # -- what it says ------------------------------------------------------------------------------
    @property
    def monitor(self) -> Any:
        """``TrainingMonitor.follow(run_dir)`` of the launch, once rank 0 records (else None)."""
        return self._monitor

    @property
    def running(self) -> bool:
        return self._proc.poll() is None

    @property
    def returncode(self) -> int | None:
        """torchrun's exit status (negative: killed by that signal), None while it runs."""
        return self._proc.poll()

    @property
    def status(self) -> str:
        code = self._proc.poll()
        if code is None:
            return "running"
        if self._stopped:
            return "stopped"
        return "finished" if code == 0 else f"failed (exit {code})"

    def line(self) -> str:
        """``torchrun: running, pid N · <launch dir>``."""
        waiting = " · waiting for rank 0's run log" if self._monitor is None and self.running else ""
        return f"torchrun: {self.status}, pid {self.pid} · {self.run_dir}{waiting}"

    def __repr__(self) -> str:
        return f"<Launch {self.line()}>"

    def output(self, tail: int = 200) -> str:
        """The last ``tail`` lines torchrun and the ranks wrote (torchrun.log), as text."""
        if type(tail) is not int or not 0 <= tail <= MAX_TAIL_LINES:
            raise ValueError(f"tail is a whole number of lines from 0 to {MAX_TAIL_LINES}, got {tail!r}")
        try:
            with open(self.run_dir / LOG_NAME, "rb") as f:
                size = f.seek(0, os.SEEK_END)
                f.seek(max(0, size - MAX_TAIL_BYTES))
                text = f.read(MAX_TAIL_BYTES).decode("utf-8", "replace")
        except OSError as exc:
            return f"(the output could not be read: {type(exc).__name__}: {exc})"
        lines = text.splitlines()
        if size > MAX_TAIL_BYTES:
            lines = lines[1:]  # the first line read is cut
        return "\n".join(lines[-tail:] if tail else [])

    # -- what it does ------------------------------------------------------------------------------
    def wait(self, timeout: float | None = None) -> int | None:
        """Wait for the job to end (at most ``timeout`` seconds): its exit status, or None if it
        still runs. Once it ended, ``monitor`` is there (if rank 0 recorded) and has read it all."""
        try:
            code = self._proc.wait(timeout)
        except subprocess.TimeoutExpired:
            return None
        self._settle()
        return code

    def _settle(self) -> None:
        """The job ended: the thread's last look for rank 0's files, then the follower's last read
        (run.json says the run ended), so ``monitor`` shows the whole run."""
        if threading.current_thread() is self._thread:
            return
        self._thread.join(5.0)
        follower = getattr(getattr(self._monitor, "parts", None), "follower", None)
        if follower is not None:
            follower.done.wait(FOLLOW_END_S)

    def stop(self, timeout: float = 10.0) -> int | None:
        """End the job: SIGTERM to torchrun's process group (torchrun stops its ranks), then, after
        ``timeout`` seconds, SIGKILL to it and to every rank still there. Idempotent."""
        if isinstance(timeout, bool) or not isinstance(timeout, (int, float)) or not 0 <= timeout <= 3600:
            raise ValueError(f"timeout is seconds from 0 to 3600, got {timeout!r}")
        with self._lock:
            if self._proc.poll() is not None:
                return self._proc.returncode
            self._stopped = True
            tree = _descendants(self.pid)  # the ranks: torchrun starts each in a session of its own
            self._signal(signal.SIGTERM)
            try:
                self._proc.wait(timeout)
            except subprocess.TimeoutExpired:
                self._signal(getattr(signal, "SIGKILL", signal.SIGTERM))
                self._proc.wait()
            _kill_left(tree, max(1.0, timeout / 2))
        self._settle()
        return self._proc.returncode

    def _signal(self, sig: int) -> None:
        with contextlib.suppress(ProcessLookupError, PermissionError):
            if _POSIX:
                os.killpg(self.pid, sig)
            else:
                self._proc.terminate()

    # -- its thread and its view -------------------------------------------------------------------
    def show(self) -> None:
        """Display the status line, Stop, Show output and (later) the charts in this cell."""
        from IPython.display import display

        if self._view is None:
            self._view = _LaunchView(self)
        display(self._view.box)

    def start(self) -> None:
        self._thread.start()

    def _watch(self) -> None:
        tries = 0
        while True:
            ended = self._proc.poll() is not None  # first: a job that just ended has written its files
            if self._monitor is None and tries < 20 and _rank0_ready(self.run_dir):
                tries += 1
                try:
                    self._follow()
                except Exception as exc:  # the notebook says why; the job goes on
                    self.notes.append(f"following {self.run_dir} failed: {type(exc).__name__}: {exc}")
            if ended and self._monitor is None and not _rank0_ready(self.run_dir):
                self.notes.append(f"the job ended and rank 0 recorded nothing in {self.run_dir} (does the script "
                                  "make a TrainingMonitor or a callback, on 2 ranks or more?)")
            if self._view is not None:
                try:
                    self._view.update()
                except Exception as exc:  # a closed widget: the job and the monitor go on without it
                    self.notes.append(f"the launch's view stopped: {type(exc).__name__}: {exc}")
                    self._view = None
            if ended:
                return
            time.sleep(POLL_S)

    def _follow(self) -> None:
        from .monitor import TrainingMonitor

        mon = TrainingMonitor.follow(self.run_dir, display=False)
        self._monitor = mon
        if self._view is not None:
            self._view.slot.children = (mon.widget,)


def _rank0_ready(where: Path) -> bool:
    return (where / META).is_file() and (rank_dir(where, 0) / META).is_file()


def _descendants(pid: int) -> list[Any]:
    import psutil

    try:
        return psutil.Process(pid).children(recursive=True)
    except psutil.Error:
        return []


def _kill_left(procs: list[Any], grace_s: float) -> None:
    """The ranks torchrun did not end within ``grace_s``: killed."""
    import psutil

    _, alive = psutil.wait_procs(procs, timeout=grace_s)
    for p in alive:
        with contextlib.suppress(psutil.Error):
            p.kill()
    psutil.wait_procs(alive, timeout=5)


class _LaunchView:
    """One status line, Stop, Show output (the log's last lines, on demand), the charts below."""

    def __init__(self, job: Launch) -> None:
        import ipywidgets as w

        self.job = job
        self.status = w.HTML(layout=w.Layout(flex="1 1 auto"))
        self.stop = w.Button(description="Stop", icon="stop", tooltip="SIGTERM to torchrun, then SIGKILL")
        self.toggle = w.ToggleButton(description="Show output", icon="terminal", value=False)
        self.out = w.HTML(layout=w.Layout(display="none"))
        self.slot = w.Box()
        self.box = w.VBox([w.HBox([self.status, self.stop, self.toggle]), self.out, self.slot])
        self.stop.on_click(self._stop)
        self.toggle.observe(lambda change: self.update(), names="value")
        self._shown_size = -1
        self.update()

    def _stop(self, _button: Any) -> None:
        self.stop.disabled = True
        self.status.value = self._line("stopping…")
        # off the kernel's thread: stop() may wait for the ranks for seconds
        threading.Thread(target=self.job.stop, name="gpu-widgets-launch-stop", daemon=True).start()

    def _line(self, text: str | None = None) -> str:
        words = html.escape(text or self.job.line())
        notes = "".join(f"<br>{html.escape(n)}" for n in self.job.notes[-3:])
        style = "font-family: var(--jp-code-font-family); color: var(--jp-ui-font-color1)"
        return f"<span style='{style}'>{words}{notes}</span>"

    def update(self) -> None:
        running = self.job.running
        self.status.value = self._line()
        self.stop.disabled = not running
        shown = self.toggle.value
        self.toggle.description = "Hide output" if shown else "Show output"
        self.out.layout.display = "block" if shown else "none"
        if shown:
            try:
                size = (self.job.run_dir / LOG_NAME).stat().st_size
            except OSError:
                size = -1
            if size != self._shown_size:  # the log grew: show its end again
                self._shown_size = size
                self.out.value = ("<pre style='max-height: 20em; overflow: auto; margin: 0; "
                                  "color: var(--jp-ui-font-color1); background: var(--jp-layout-color2)'>"
                                  f"{html.escape(self.job.output(200))}</pre>")

