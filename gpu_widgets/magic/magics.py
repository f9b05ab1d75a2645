"""``%gpuwatch`` and ``%%gpuwatch``: load with ``%load_ext gpu_widgets``.

    %gpuwatch [--window SECONDS] [--interval SECONDS] [--gpus auto|all|0,1]
        show a live GPU dashboard (replaces the previous one)
    %gpuwatch stop
        stop the live dashboard
    %gpu_free
        give back the memory a failed cell keeps (gpu_widgets.free_gpu_memory())
    %gpu_cells [--last N] [--local]
        the cells that used a GPU and what each cost (cell_magic.py)
    %%gpuwatch [--interval SECONDS] [--gpus auto|all|0,1] [--window SECONDS] [--quiet] [--profile] [--memory]
        run the cell while watching the GPUs, then print what they did (--profile: and why the
        GPU is not busy, from torch.profiler; --memory: and where the GPU memory went)

The options are declared with IPython's ``magic_arguments``: ``%gpuwatch?`` and ``%gpuwatch --help``
show them. Bad options print the usage and change nothing (an IPython UsageError: no traceback).
The cell's own exception is re-raised unchanged after the summary is printed.
"""
from __future__ import annotations

import argparse
import ast
import math
import sys
import time
from collections import deque
from typing import Any

from IPython.core.error import UsageError
from IPython.core.magic import Magics, line_cell_magic, line_magic, magics_class
from IPython.core.magic_arguments import argument, kwds, magic_arguments, parse_argstring

from ..sampling.sampler import MIN_INTERVAL_S, get_sampler
from ..sampling.snapshot import aged, with_status
from ..sampling.stall import STALE
from ..widgets import leases
from . import cell_magic, oom_hook
from .cell_profiling import cell_profile, cell_recording, show_profile, show_recording
from .summary import summarize, summary_html
from ..widgets.dashboard import MAX_WINDOW_S, GpuDashboard, wait_for_gpm
from ..runs.gpu_trace import GpuTrace
from ..widgets.process_gpus import watched
from ..widgets.torch_probe import probe

USAGE_TAIL = """
examples:
  %gpuwatch                      live dashboard of the GPUs this kernel uses
  %gpuwatch --gpus all --window 600
  %gpuwatch stop
  %%gpuwatch --interval 0.5      (first line of a cell) run the cell, then print a GPU summary
  %%gpuwatch --profile           the same, and a profile that says why the GPU is not busy
  %%gpuwatch --memory            the same, and where the GPU memory went (PyTorch's allocator)
"""


# Ranges and GPU lists are checked by argparse ``type=`` callables, so a bad value is reported as
# "argument --interval: <why>" like any other parse error.
def _seconds(lo: float, hi: float) -> Any:
    def parse(text: str) -> float:
        try:
            value = float(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"expected a number of seconds, got {text!r}") from None
        if not math.isfinite(value) or not lo <= value <= hi:
            raise argparse.ArgumentTypeError(f"must be from {lo:g} to {hi:g} seconds, got {text!r}")
        return value

    return parse


def _gpus(text: str) -> Any:
    if text in ("auto", "all"):
        return text
    try:
        indices = [int(part) for part in text.split(",") if part.strip()]
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected auto, all or GPU indices such as 0,1; got {text!r}") from None
    if not indices or any(i < 0 for i in indices):
        raise argparse.ArgumentTypeError(f"expected auto, all or GPU indices such as 0,1; got {text!r}")
    return frozenset(indices)


def _in_kernel(shell: Any) -> bool:
    return getattr(shell, "kernel", None) is not None


def _help(parser: argparse.ArgumentParser) -> str:
    """The option listing with a plain "usage:" line, for ``--help`` and after an error.

    IPython's formatter starts the usage with an RST block ("::\n\n  %gpuwatch ...", which is what
    ``%gpuwatch?`` shows); printed as text, "usage: %gpuwatch ..." reads better.
    """
    rst_usage = parser.format_usage().strip()
    first, *rest = rst_usage.removeprefix("::").strip().splitlines()
    indent = " " * (len("usage: ") + first.index(" ") + 1)  # under the first option, as argparse does
    usage = "\n".join([f"usage: {first}", *(indent + line.strip() for line in rest)])
    return usage + parser.format_help().strip().removeprefix(rst_usage)


class CellDashboard(GpuDashboard):
    """The live charts of one ``%%gpuwatch`` cell: the cell's own samples only, so its charts span
    the cell so far (an 8 s cell is not drawn on a 300 s axis), at most ``--window`` seconds.

    The dashboard reads "the last ``window_s`` seconds"; here that is the time since the cell
    started, so the sampler's older history (an earlier dashboard's) stays out of the cell's charts.
    """

    def __init__(self, *, started: float, **kwargs: Any) -> None:
        self._started: float | None = None  # the full window while the dashboard is built
        super().__init__(start=False, **kwargs)
        self._started = started
        self.start()

    @property
    def window_s(self) -> float:
        if self._started is None:
            return self._full_window_s
        # Back from the newest sample (the dashboard's "now") to the cell's start, not from the clock.
        latest = self._sampler.latest if self._sampler is not None else None
        now = latest["timestamp"] if latest is not None else time.time()
        return min(self._full_window_s, max(0.0, now - self._started))

    @window_s.setter
    def window_s(self, value: float) -> None:
        self._full_window_s = value


@magics_class
class GpuWatchMagics(Magics):
    dashboard: GpuDashboard | None = None

    @magic_arguments()
    @kwds(epilog=USAGE_TAIL)
    @argument("-h", "--help", action="store_true", help="show this help and do nothing else")
    @argument("--window", type=_seconds(10, MAX_WINDOW_S), default=300.0, metavar="SECONDS",
              help=f"how much history the charts show (10-{MAX_WINDOW_S:g}, default 300)")
    @argument("--interval", type=_seconds(MIN_INTERVAL_S, 60), metavar="SECONDS",
              help=f"sampling interval for this kernel ({MIN_INTERVAL_S:g}-60; default: unchanged, 1 s at start)")
    @argument("--gpus", type=_gpus, default="auto", metavar="auto|all|0,1",
              help="which GPUs: the ones this kernel uses (auto, default), all, or NVML indices")
    @argument("--quiet", action="store_true", help="%%%%gpuwatch: no live charts, only the summary")
    @argument("--memory", action="store_true",
              help="%%%%gpuwatch: record PyTorch's CUDA allocator while the cell runs and show where the memory "
                   "went (the allocation sites alive at the peak)")
    @argument("--profile", action="store_true",
              help="%%%%gpuwatch: profile the cell with torch.profiler and say why the GPU is not busy "
                   "(each step of a TrainingMonitor's loop in it, else the whole cell as one step)")
    # No choices=: argparse would name the positional by its dest in the error ("argument action: ...").
    @argument("action", nargs="?", metavar="stop", help="stop the live dashboard (line magic only)")
    @line_cell_magic
    def gpuwatch(self, line: str = "", cell: str | None = None) -> Any:
        """Watch the GPUs: a live dashboard (%gpuwatch) or a summary of one cell (%%gpuwatch)."""
        __tracebackhide__ = True
        parser = GpuWatchMagics.gpuwatch.parser
        try:
            args = parse_argstring(GpuWatchMagics.gpuwatch, line)
        except UsageError as exc:
            raise UsageError(f"{exc}\n\n{_help(parser)}") from None
        except ValueError as exc:  # the line's quotes do not close
            raise UsageError(f"cannot split the options {line.strip()!r}: {exc}\n\n{_help(parser)}") from None
        if args.help:
            print(_help(parser))
            return None
        if args.action not in (None, "stop"):
            raise UsageError(f"unknown action {args.action!r}: the only one is stop (%gpuwatch stop)\n\n{_help(parser)}")
        if cell is None:
            return self._line(args)
        if args.action:
            raise UsageError(f"'{args.action}' is for the line magic: %gpuwatch {args.action}\n\n{_help(parser)}")
        return self._cell(args, cell)
    # (--profile on the line magic is refused in _line: a profile needs a cell to run)

    @line_magic
    def gpu_free(self, line: str = "") -> Any:
        """%gpu_free: give back the memory a failed cell keeps (gpu_widgets.free_gpu_memory())."""
        if line.strip():
            raise UsageError(f"%gpu_free takes no options, got {line.strip()!r}")
        from ..memory.freeing import free_gpu_memory

        report = free_gpu_memory(self.shell)
        if _in_kernel(self.shell):
            from IPython.display import display

            display({"text/plain": str(report), "text/html": report._repr_html_()}, raw=True)
        else:
            print(report)

    # -- %gpuwatch ------------------------------------------------------------------------------
    def _stop_dashboard(self) -> bool:
        dash, GpuWatchMagics.dashboard = GpuWatchMagics.dashboard, None
        if dash is None:
            return False
        dash.stop()
        return True

    def _line(self, args: argparse.Namespace) -> None:
        for flag in ("profile", "memory"):
            if getattr(args, flag):
                raise UsageError(f"--{flag} is for the cell magic: put %%gpuwatch --{flag} on a cell's first line")
        if args.action == "stop":
            print("gpuwatch: live dashboard stopped" if self._stop_dashboard() else "gpuwatch: no live dashboard to stop")
            return
        try:
            sampler = leases.acquire(args.interval)
        except leases.ConfigError as exc:
            print(f"gpuwatch: GPU monitoring off: {exc}", file=sys.stderr)
            return
        try:
            if args.interval is not None:
                print(f"gpuwatch: sampling every {args.interval:g} s (for this whole kernel)")
            self._stop_dashboard()
            if not _in_kernel(self.shell):
                # No front end to draw widgets (terminal IPython): print the GPUs once instead.
                from ..cli.render import render_snapshot
                from ..widgets.dashboard import wait_for_sample

                gpm = leases.GpmAsk("gpuwatch")
                gpm.hold(sampler)  # it looks: SM and tensor activity are read while it waits
                try:
                    wait_for_sample(sampler)
                    wait_for_gpm(sampler)
                finally:
                    gpm.release()
                snap = sampler.latest
                age, why = sampler.staleness()
                if why is not None:  # a driver call hangs: the last sample (if any), marked stale
                    snap = aged(with_status(snap, STALE, why, sampler.backend), STALE, why, age)
                if snap is None:
                    print("gpuwatch: no GPU sample yet (the sampler has not finished its first read)")
                else:
                    from .._version import __version__

                    print(render_snapshot(snap, __version__))
                return
            GpuWatchMagics.dashboard = GpuDashboard(window_s=args.window, gpus=args.gpus, display=True)
        finally:
            leases.release(sampler)

    # -- %%gpuwatch -----------------------------------------------------------------------------
    def _cell(self, args: argparse.Namespace, cell: str) -> Any:
        __tracebackhide__ = True  # IPython hides this frame from the cell's traceback
        config_error = None
        sampler = None
        old_interval = None
        try:
            old_interval = get_sampler(start=False).interval_s  # restored after the cell
            sampler = leases.acquire(args.interval)
        except leases.ConfigError as exc:
            config_error = str(exc)
        inbox: deque[dict[str, Any]] = deque(maxlen=100_000)
        unsubscribe = None
        dash = None
        t0 = time.time()
        trace = GpuTrace(t0=t0)
        gpm = leases.GpmAsk("gpuwatch-cell")
        if sampler is not None:
            latest = sampler.latest
            if latest is not None and latest["timestamp"] > t0 - 2 * sampler.interval_s:
                inbox.append(latest)
            unsubscribe = sampler.subscribe(inbox.append)
            gpm.hold(sampler)  # the summary shows SM activity: asked for while the cell runs
            if not args.quiet and _in_kernel(self.shell):
                try:
                    dash = CellDashboard(started=t0, window_s=args.window, gpus=args.gpus, sampler=sampler,
                                         display=True)
                except Exception as exc:  # the cell runs whatever happens to the charts
                    print(f"gpuwatch: no live charts ({type(exc).__name__}: {exc})", file=sys.stderr)
        recording = cell_recording(args.memory)
        profiler = cell_profile(args.profile)
        error: BaseException | None = None
        result = None
        try:
            result = self._run(cell)
        except BaseException as exc:  # KeyboardInterrupt too: summarise, then re-raise as is
            error = exc
        duration = time.time() - t0
        try:
            self._summarize(args, sampler, trace, inbox, unsubscribe, dash, duration, old_interval, config_error)
        except Exception as exc:
            print(f"gpuwatch: could not summarise ({type(exc).__name__}: {exc})", file=sys.stderr)
        finally:
            gpm.release()
        if profiler is not None:
            show_profile(self.shell, profiler, trace, _in_kernel(self.shell))
        if recording is not None:
            show_recording(self.shell, recording, _in_kernel(self.shell))
        if error is not None:
            raise error
        return result

    def _summarize(self, args, sampler, trace, inbox, unsubscribe, dash, duration, old_interval, config_error) -> None:
        try:
            if unsubscribe is not None:
                unsubscribe()
            if dash is not None:
                dash.stop()
            torch_state = None
            while inbox:
                snap = inbox.popleft()
                if torch_state is None:
                    torch_state = probe([d.get("uuid") for d in snap.get("devices", ())], snap.get("cuda_visible_devices"))
                trace.add_snapshot(snap, watched(args.gpus, snap, torch_state))
            interval = sampler.interval_s if sampler is not None else 0.0
            text, data = summarize(trace, duration, interval, torch_state, config_error)
            if _in_kernel(self.shell):  # HTML in the widgets' look, the same text beside it
                from IPython.display import display

                display({"text/plain": text, "text/html": summary_html(text, data)}, raw=True)
            else:
                print(text)
            self.shell.user_ns["_gpuwatch"] = data
        finally:
            if sampler is not None:
                if args.interval is not None and old_interval is not None:
                    sampler.interval_s = old_interval
                leases.release(sampler)

    def _run(self, cell: str) -> Any:
        """Run the cell like IPython would: its last expression becomes the result (``Out``)."""
        __tracebackhide__ = True
        shell = self.shell
        source = shell.transform_cell(cell)
        # A cached name lets tracebacks show the cell's own lines.
        name = shell.compile.cache(source, shell.execution_count, raw_code=cell)
        tree = shell.transform_ast(shell.compile.ast_parse(source, filename=name))
        last = None
        if tree.body and isinstance(tree.body[-1], ast.Expr):
            last = ast.Expression(tree.body.pop().value)
        ns = shell.user_ns
        exec(shell.compile(tree, name, "exec"), ns)
        if last is not None:
            return eval(shell.compile(last, name, "eval"), ns)
        return None


def load_ipython_extension(ipython: Any) -> None:
    ipython.register_magics(GpuWatchMagics)
    oom_hook.register(ipython)
    if cell_magic.GpuCellsMagics.book is None:  # loaded twice: one book
        cell_magic.register(ipython)


def unload_ipython_extension(ipython: Any) -> None:
    oom_hook.unregister(ipython)
    cell_magic.unregister(ipython)
    if GpuWatchMagics.dashboard is not None:
        GpuWatchMagics.dashboard.stop()
        GpuWatchMagics.dashboard = None
