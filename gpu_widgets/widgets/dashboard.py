"""GpuDashboard: the GPUs of this machine, live, over the last few minutes (what ``%gpuwatch`` shows).

Reads the sampler's bounded history, never the GPUs themselves. A timer thread (default once a
second, the sampler's pace) redraws one chart per dashboard metric of the catalogue
(``shown_in(DASHBOARD)``: busy %, memory in GiB, temperature and power today), one line per GPU
against seconds before now, titled, scaled and ranged as the catalogue says. The thread stops with
``stop()``/``close()`` or when nothing references the dashboard any more. A stopped dashboard's
output becomes its last frame as a picture (final_output): a saved notebook reopens showing it.
"""
from __future__ import annotations

import threading
import time
from html import escape
import weakref
from collections.abc import Sequence
from typing import Any, Callable

import numpy as np

from ..metrics.catalogue import DASHBOARD, Metric, shown_in
from ..metrics.fields import GPM_FIELDS
from ..sampling.sampler import Sampler
from ..sampling.snapshot import with_status
from ..sampling.stall import STALE
from . import leases
from .cell_hooks import in_kernel
from .gpu_summary import across, summarised
from .dashboard_regions import Regions
from .final_output import static_bundle
from .header import render_dashboard
from .process_gpus import check_choice, watched
from .png_cards import CachedPng
from .torch_probe import probe
from .view import ChartsView, LineData, color
from .view_png import render_view_png

MAX_WINDOW_S = 3600.0
LIVE_X_LABEL = "seconds (0 = now)"


def x_label(running: bool, newest: float | None) -> str:
    """The time axis' words: "0 = now" only while live; a stopped chart is frozen at its newest
    sample, so it says which time its 0 is ("seconds before 14:03:22 (stopped)", local time)."""
    if running or newest is None:
        return LIVE_X_LABEL
    return f"seconds before {time.strftime('%H:%M:%S', time.localtime(newest))} (stopped)"


def _series(dev: dict[str, Any], m: Metric) -> np.ndarray | None:
    """A GPU's history of ``m`` in the metric's unit, None (unknown) as NaN: a gap in the line.
    None when the history has no such field (nothing to draw)."""
    raw = dev.get(m.field)
    if raw is None:
        return None
    ys = np.array(raw, dtype=float)  # numpy turns None into NaN
    if m.field in GPM_FIELDS and not np.isfinite(ys).any():
        return None  # no GPM on this GPU (or nobody asked yet): no empty "SM active" chart
    return ys * m.scale if m.scale != 1.0 else ys


def summary_lines(metrics: Sequence[Metric], devices: list[dict[str, Any]], xs: np.ndarray) -> list[LineData]:
    """Many GPUs, none this process's: per chart the GPUs' mean and their min–max band. The
    history's columns share one time axis, so the aggregate is exact at every point."""
    out: list[LineData] = []
    for m in metrics:
        rows = [ys for dev in devices if (ys := _series(dev, m)) is not None and len(ys) == len(xs)]
        if not rows:
            continue
        mean, lo, hi = across(np.vstack(rows))
        out.append((m.id, f"mean of {len(devices)} GPUs", color(0), "solid", xs, mean))
        out.append((m.id, "min–max", color(0), "range", xs, np.vstack((lo, hi))))
    return out


def _top(m: Metric, latest: list[dict[str, Any]]) -> float | None:
    """The chart's fixed top (``Metric.top``) from the GPUs drawn: their limit values in the
    latest snapshot (the history keeps no series of a limit read on the slow cadence, such as
    the slowdown temperature)."""
    return m.top(dev.get(m.y_max_field) for dev in latest)  # type: ignore[arg-type]


class _Handles:
    """What a live dashboard holds outside itself; released by stop() or when it is collected."""

    def __init__(self) -> None:
        self.stop = threading.Event()
        self.leased: list[Sampler] = []
        self.gpm = leases.GpmAsk("dashboard")

    def release(self) -> None:
        self.stop.set()
        self.gpm.release()
        while self.leased:
            leases.release(self.leased.pop())


def _loop(ref: "weakref.ref[GpuDashboard]", stop: threading.Event, period: float) -> None:
    while not stop.wait(period):
        dash = ref()
        if dash is None:
            return
        dash.refresh()
        del dash


class GpuDashboard:
    """Live charts of the GPUs over the last ``window_s`` seconds.

    ``gpus``: ``"auto"`` (the GPUs this process uses: PyTorch's, else CUDA_VISIBLE_DEVICES, else
    all), ``"all"``, or NVML indices such as ``[0, 1]``. ``static_image``: once stopped, the
    displayed output becomes a PNG of the last frame under the header's text, without the widget
    (default True; needs matplotlib): a saved notebook reopens showing it.
    """

    def __init__(self, *, window_s: float = 300.0, gpus: Any = "auto", refresh_s: float = 1.0,
                 max_points: int = 600, display: bool = True, start: bool = True,
                 sampler: Sampler | None = None, static_image: bool = True) -> None:
        if isinstance(window_s, bool) or not isinstance(window_s, (int, float)) or not 10 <= window_s <= MAX_WINDOW_S:
            raise ValueError(f"window_s must be a number of seconds from 10 to {MAX_WINDOW_S:g}, got {window_s!r}")
        if isinstance(refresh_s, bool) or not isinstance(refresh_s, (int, float)) or not 0.25 <= refresh_s <= 60:
            raise ValueError(f"refresh_s must be a number of seconds from 0.25 to 60, got {refresh_s!r}")
        if isinstance(max_points, bool) or not isinstance(max_points, int) or not 4 <= max_points <= 10_000:
            raise ValueError(f"max_points must be a whole number from 4 to 10000, got {max_points!r}")
        self.gpus = check_choice(gpus)
        if sampler is not None and not isinstance(sampler, Sampler):
            raise TypeError(f"sampler must be a gpu_widgets.sampling.sampler.Sampler, got {type(sampler).__name__}")
        self.window_s = float(window_s)
        self.refresh_s = float(refresh_s)
        self.max_points = max_points
        self._sampler_arg = sampler
        self._sampler: Sampler | None = sampler
        self._config_error: str | None = None
        self._handles = _Handles()
        self._thread: threading.Thread | None = None
        self._lock = threading.Lock()
        self.errors: list[str] = []
        self.static_image = bool(static_image)
        self._png = CachedPng()
        self._frames = 0  # redraws so far: the picture is drawn again only after one
        self._output: Any = None  # the display handle, when displayed by display=True
        self._output_static = False  # that output shows the picture now
        # The time axis spans the samples shown until they fill the window (no blank axis at first).
        self._view = ChartsView(render_dashboard(None, None, self.window_s, False), time_window=self.window_s)
        # Read once: a dashboard keeps the charts it was made with.
        self.metrics: tuple[Metric, ...] = shown_in(DASHBOARD)
        self._tops: dict[str, float | None] = {}
        self._x_label = LIVE_X_LABEL
        self._regions = Regions()  # throttled and lost stretches, shaded as in the monitor
        for m in self.metrics:
            self._define(m, m.y_max)
        weakref.finalize(self, self._handles.release)  # a dropped dashboard returns its lease
        if start:
            self.start()
        if display and in_kernel():
            from IPython.display import display as show

            self._output = show(self, display_id=True)  # updated in place by stop() and start()

    @property
    def widget(self) -> Any:
        return self._view.widget

    @property
    def running(self) -> bool:
        return self._thread is not None and self._thread.is_alive()

    def start(self) -> "GpuDashboard":
        """Start (or restart) the live updates. Idempotent."""
        if self.running:
            return self
        h = self._handles
        if self._sampler_arg is None and not h.leased:
            try:
                self._sampler = leases.acquire()
                h.leased.append(self._sampler)
            except leases.ConfigError as exc:
                self._config_error = str(exc)
        h.stop = threading.Event()
        self._thread = threading.Thread(target=_loop, args=(weakref.ref(self), h.stop, self.refresh_s),
                                        name="gpu-widgets-dashboard", daemon=True)
        self._thread.start()
        self.refresh()
        self._update_output()  # restarted: the live widget again
        return self

    def stop(self) -> None:
        """Stop the live updates (the charts keep their last state). Idempotent."""
        thread, self._thread = self._thread, None
        self._handles.release()
        if thread is not None and thread is not threading.current_thread():
            thread.join(timeout=5.0)
        self.refresh()
        self._update_output()

    def close(self) -> None:
        """Stop and remove the widgets."""
        self.stop()
        self._view.close()

    def _guard(self, fn: Callable[[], None]) -> None:
        try:
            fn()
        except Exception as exc:  # shown, never raised into the notebook
            self._problem(f"{type(exc).__name__}: {exc}")

    def _problem(self, message: str) -> None:
        self.errors.append(message)
        del self.errors[:-20]

    def _update_output(self) -> None:
        """Show the widget while live, the picture once stopped, in the output display=True made."""
        if self._output is None or self._static() == self._output_static:
            return
        try:
            self._output.update(self)
            self._output_static = self._static()
        except Exception as exc:
            self._problem(f"updating the output: {type(exc).__name__}: {exc}")

    def refresh(self) -> None:
        """Redraw from the sampler's history now."""
        if not self._lock.acquire(timeout=5.0):
            return
        try:
            self._guard(self._draw)
        finally:
            self._lock.release()

    def _define(self, m: Metric, top: float | None) -> None:
        self._tops[m.id] = top
        # Ranked by the catalogue: a chart shown late (SM active, on its first GPM figure) takes its
        # place, the same order in every dashboard and %%gpuwatch cell.
        self._view.define_chart(m.id, shared_x=True, title=m.title, x_label=self._x_label, y_label=m.unit,
                                y_min=m.y_min, y_max=top, decimals=m.decimals, height="220px",
                                rank=self.metrics.index(m))

    def _set_x_label(self, label: str) -> None:
        """Relabel the time axis of every chart, shown or not yet."""
        if label == self._x_label:
            return
        self._x_label = label
        for m in self.metrics:
            self._define(m, self._tops.get(m.id))
        for chart in self._view.charts.values():
            chart.x_axis.label = label

    def _set_top(self, m: Metric, top: float | None) -> None:
        """Follow a limit field (memory total, power limit): a full chart means "at the limit"."""
        if top is None or top == self._tops.get(m.id):
            return
        self._tops[m.id] = top
        self._view.set_y_max(m.id, top)  # a chart not shown yet gets it from the start

    def _draw(self) -> None:
        sampler = self._sampler
        if self.running:  # a live dashboard looks: its sampler reads SM and tensor activity
            self._handles.gpm.renew(sampler, self.refresh_s)
        snap = sampler.latest if sampler is not None else None
        lines: list[LineData] = []
        missing: list[int] = []
        shown = None
        summary = False
        if snap is not None:
            torch = probe([d.get("uuid") for d in snap.get("devices", ())], snap.get("cuda_visible_devices"))
            shown = watched(self.gpus, snap, torch)
            summary = summarised(self.gpus, snap, torch)
            now = snap["timestamp"]
            hist = sampler.history.since(now - self.window_s, max_points=self.max_points)
            xs = np.asarray([t - now for t in hist["timestamps"]], dtype=float)
            present = {d["index"] for d in hist["devices"]}
            missing = sorted(set(self.gpus) - present) if isinstance(self.gpus, frozenset) and present else []
            drawn = [dev for dev in hist["devices"] if shown is None or dev["index"] in shown]
            latest = [dev for dev in snap.get("devices", ()) if shown is None or dev["index"] in shown]
            for m in self.metrics:
                self._set_top(m, _top(m, latest))
            lines = summary_lines(self.metrics, drawn, xs) if summary else [
                (m.id, f"GPU {dev['index']}", color(dev["index"]), "solid", xs, ys)
                for dev in drawn for m in self.metrics if (ys := _series(dev, m)) is not None]
            lines += self._regions.lines(self.metrics, drawn, xs, self._tops, summary)
        if self.running and sampler is not None:
            status, reason = leases.freshness(sampler, None, None)
            if status == STALE:  # stuck: say so, over the last sample (or none)
                snap = with_status(snap, status, reason, sampler.backend)
        self._set_x_label(x_label(self.running, (snap or {}).get("timestamp")))
        html = render_dashboard(snap, shown, self.window_s, self.running, self._config_error, missing, summary)
        if self.errors:
            html += f'<div class="gpuw-error">dashboard problem: {escape(self.errors[-1])}</div>'
        self._view.update(html, lines)
        self._frames += 1

    def _static(self) -> bool:
        return self.static_image and not self.running

    def _repr_mimebundle_(self, **kwargs: Any) -> dict[str, Any]:
        png = self._png.get(self._frames, lambda: render_view_png(self._view), self._problem) if self._static() else None
        if png is not None:  # stopped: the last frame and the header, no widget (final_output)
            return static_bundle(self._view.header.value, png, repr(self), "GPU dashboard: last frame of the charts")
        bundle = self._view.widget._repr_mimebundle_(**kwargs)
        bundle["text/plain"] = repr(self)
        return bundle

    def __repr__(self) -> str:
        return f"<GpuDashboard {'live' if self.running else 'stopped'}, last {self.window_s:g} s>"


def wait_for_sample(sampler: Sampler, timeout: float = 3.0) -> bool:
    """True once the sampler has a sample (the first tick comes up to one interval after start)."""
    end = time.monotonic() + timeout
    while sampler.latest is None and time.monotonic() < end:
        time.sleep(0.05)
    return sampler.latest is not None


def _gpm_reading(snap: Any) -> bool:
    """Whether a GPU's GPM figures are still being read (asked for, first two samples not taken)."""
    return any(d.get(f) is None and str((d.get("unavailable") or {}).get(f, "")).startswith("not read")
               for d in snap.get("devices", ()) if d.get("status") != "lost" for f in GPM_FIELDS)


def wait_for_gpm(sampler: Sampler, timeout: float = 3.0) -> bool:
    """True once the newest sample has its GPM figures, or says why it has none (no GPM on the GPU);
    a lease must be held. The first comes about a second after asking (Sampler.want_gpm)."""
    end = time.monotonic() + timeout
    while (sampler.latest is None or _gpm_reading(sampler.latest)) and time.monotonic() < end:
        time.sleep(0.05)
    return sampler.latest is not None and not _gpm_reading(sampler.latest)
