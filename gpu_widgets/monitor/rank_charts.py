"""A launch in one view: "step time by rank" and "data wait by rank", and every rank's GPUs.

Each rank's data_wait.jsonl bins (``step_s/steps``, ``wait_s/steps``, in ms) are folded, as they
are read, into two Decimators per rank: memory per rank is bounded (older bins merge into wider
min/max blocks) whatever the run's length, and a redraw sends at most a share of ``max_points``
per line. Up to MAX_RANK_LINES ranks each get a line ("rank r", "rank r · host" when the launch
spans several hosts); more get, per chart, the min–max band of all ranks and the line of the
slowest one (over its last RECENT_BINS bins), as the GPU charts summarise many GPUs.

The GPUs of rank r > 0 are folded into a GpuTrace of their own (on rank 0's time axis), and every
rank's GPUs are drawn with a label ``rank r · host · GPU i`` (DeviceTrace.label) and a colour slot
of their own, a GPU that several ranks of a host recorded once ("ranks 0, 1 · GPU 0"); more than
MAX_RANK_LINES of them: the GPU charts' summary. Fed through RunFeed's hooks
by load(), follow() and, once displayed, rank 0's live monitor (launch_tails reads the files). A
single-process run has no RankCharts: nothing here runs.
"""
from __future__ import annotations

from collections import deque
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

import numpy as np

from ..runs.gpu_trace import DeviceTrace, GpuTrace
from ..store.decimator import Decimator
from ..widgets.drawable import narrow
from ..widgets.gpu_summary import aggregate
from ..widgets.view import ChartsView, LineData, color

MAX_RANK_LINES = 8  # ranks (and GPUs) drawn one line each; more: a band and the slowest one
RECENT_BINS = 20  # the slowest rank: by its mean over its last bins (~10 s of half-second bins)
STEP_CHART, WAIT_CHART = "rank_step", "rank_wait"
STEP_TITLE, WAIT_TITLE = "step time by rank", "data wait by rank"
BAND, BAND_COLOR = "min–max", color(0)
CHART_RANK = 0.5  # in the view's grid: after the metric charts (0), before the GPU charts (1)
CHARTS = ((STEP_CHART, STEP_TITLE), (WAIT_CHART, WAIT_TITLE))


def rank_label(rank: int, host: str | None, hosts: bool) -> str:
    """"rank 1", or "rank 1 · node-b" when the launch spans several hosts."""
    return f"rank {rank} · {host}" if hosts and host else f"rank {rank}"


def ranks_label(ranks: Sequence[int], host: str | None, hosts: bool) -> str:
    """rank_label for one rank; "ranks 0, 2" or "ranks 0–3" (runs of three or more as a range)
    for the ranks that recorded one GPU."""
    if len(ranks) == 1:
        return rank_label(ranks[0], host, hosts)
    runs: list[list[int]] = []
    for r in sorted(set(ranks)):
        if runs and r == runs[-1][-1] + 1:
            runs[-1].append(r)
        else:
            runs.append([r])
    words = ", ".join(f"{run[0]}–{run[-1]}" if len(run) > 2 else ", ".join(map(str, run)) for run in runs)
    return f"ranks {words} · {host}" if hosts and host else f"ranks {words}"


def _has_torch(d: DeviceTrace) -> bool:
    """Whether the rank's copy of a GPU carries its own process's PyTorch allocator readings."""
    curve = d.curves.get("torch_allocated")
    return curve is not None and curve.count > 0


class RankSeries:
    """One rank's step time and data wait per step (ms), bounded for drawing."""

    def __init__(self, rank: int, max_points: int) -> None:
        self.rank = rank
        self.host: str | None = None
        self.curves = (Decimator(max_points), Decimator(max_points))  # step ms, wait ms
        self.recent = (deque(maxlen=RECENT_BINS), deque(maxlen=RECENT_BINS))
        self.bins = 0
        self.trace: GpuTrace | None = None  # rank > 0: its GPUs

    def add(self, bins: Iterable[Mapping[str, Any]], t0: float) -> None:
        for b in bins:
            n = b["steps"]
            if not n:
                continue
            x = float(b["time"]) - t0
            for curve, recent, v in zip(self.curves, self.recent, (b["step_s"], b["wait_s"])):
                ms = 1000.0 * float(v) / n
                curve.extend((x,), (ms,))
                recent.append(ms)
            self.bins += 1

    def recent_mean(self, which: int) -> float:
        r = self.recent[which]
        return sum(r) / len(r) if r else -1.0


class RankCharts:
    """The by-rank lines of a launch's view, drawn into ``view`` (MonitorCharts calls it)."""

    def __init__(self, view: ChartsView, max_points: int) -> None:
        self.max_points = max_points
        self.hints = view.hints  # a GPU line's hover text (its rank, host and GPU in full)
        self.series: dict[int, RankSeries] = {}
        self.several_hosts = False
        self.changed = False
        self.slowest: dict[str, str] = {}  # chart -> the "slowest" line's name drawn last
        for name, title in CHARTS:
            view.define_chart(name, shared_x=True, title=title, x_label="seconds since start", y_label="ms",
                              y_min=0.0, decimals=1, rank=CHART_RANK)

    def rank(self, rank: int, host: str | None = None) -> RankSeries:
        s = self.series.get(rank)
        if s is None:
            s = self.series[rank] = RankSeries(rank, self.max_points)
            self.changed = True
        if host and s.host != host:
            s.host = host
            self.changed = True  # a label may change: every line again
        return s

    def set_hosts(self, hosts: Sequence[str]) -> None:
        several = len(set(hosts)) > 1
        if several != self.several_hosts:
            self.several_hosts, self.changed = several, True

    def add_bins(self, rank: int, bins: Sequence[Mapping[str, Any]], t0: float) -> None:
        if bins:
            self.rank(rank).add(bins, t0)
            self.changed = True

    def add_gpu_rows(self, rank: int, rows: Sequence[Mapping[str, Any]], t0: float) -> GpuTrace:
        """Rank ``rank``'s (> 0) GPU samples, into its own trace; returns the trace."""
        s = self.rank(rank)
        if s.trace is None:
            s.trace = GpuTrace(t0=t0, max_points=self.max_points)
        for row in rows:
            s.trace.add_row(row)
        if rows:
            s.trace.status = "ok"
        return s.trace

    def drawn(self) -> list[RankSeries]:
        return [s for _, s in sorted(self.series.items()) if s.bins]

    def units(self) -> int:
        """Lines' worth of points the by-rank charts draw (each a GPU line's share): a line per
        rank and chart, or per chart a band (two rows) and the slowest rank's line."""
        n = len(self.drawn())
        return 0 if not n else 2 * n if n <= MAX_RANK_LINES else 2 * 3

    # -- GPUs -------------------------------------------------------------------------------------
    def devices(self, rank0: Sequence[DeviceTrace]) -> list[DeviceTrace]:
        """Rank 0's GPUs shown and every other rank's, each labelled with its rank (and host).

        A GPU that several ranks of one host recorded (CPU ranks each see every GPU of the
        machine; ranks sharing one GPU) is drawn once, from the lowest of them, labelled with
        all of them ("ranks 0–3 · GPU 0"): the same device's readings, not a GPU per rank. A
        later rank's copy that carries its own PyTorch allocator readings stays a line of its own."""
        ranks_of: dict[tuple[str, str], list[int]] = {}  # a GPU drawn -> the ranks that recorded it
        drawn: list[tuple[DeviceTrace, list[int], str | None]] = []
        for rank, devices in [(0, rank0)] + [(r, sorted(s.trace.devices.values(), key=lambda d: d.index))
                                             for r, s in sorted(self.series.items()) if r and s.trace is not None]:
            host = self.series[rank].host if rank in self.series else None
            for d in devices:
                # NVML's index is the machine's (CUDA_VISIBLE_DEVICES does not renumber it); a
                # rank of no known host is never taken for another's
                key = (host, d.uuid or f"index {d.index}") if host else None
                if key in ranks_of and not _has_torch(d):
                    ranks_of[key].append(rank)
                    continue
                ranks = [rank]
                if key:
                    ranks_of.setdefault(key, ranks)
                drawn.append((d, ranks, host))
        out: list[DeviceTrace] = []
        for d, ranks, host in drawn:
            d.label = f"{ranks_label(ranks, host, self.several_hosts)} · GPU {d.index}"
            # On hover always with the host (one-host runs name none in the label), and the GPU's uuid.
            self.hints[d.label] = (f"{ranks_label(ranks, host or 'host unknown', True)} · GPU {d.index}"
                                        + (f" ({d.uuid})" if d.uuid else ""))
            d.slot = len(out)
            out.append(d)
        return out

    # -- drawing ----------------------------------------------------------------------------------
    def lines(self, points: int, force: bool = False) -> list[LineData]:
        """The by-rank lines when bins came (or ``force``: every line got a new share)."""
        if not (self.changed or force):
            return []
        self.changed = False
        return self.all_lines(points)

    def all_lines(self, points: int, drawing: bool = True) -> list[LineData]:
        """Every by-rank line; ``drawing``: for the widget (which slowest line it shows is kept)."""
        ranks = self.drawn()
        out: list[LineData] = []
        for which, (chart, _) in enumerate(CHARTS):
            if len(ranks) <= MAX_RANK_LINES:
                for s in ranks:
                    px, py = s.curves[which].points(points)
                    out.append((chart, rank_label(s.rank, s.host, self.several_hosts), color(s.rank), "solid",
                                narrow(px), narrow(py)))
                continue
            agg = aggregate((s.curves[which].points(points) for s in ranks), points)
            if agg is not None:
                xs, _, band = agg
                out.append((chart, BAND, BAND_COLOR, "range", narrow(xs), narrow(band)))
            slow = max(ranks, key=lambda s: s.recent_mean(which))
            name = f"slowest: {rank_label(slow.rank, slow.host, self.several_hosts)}"
            before = self.slowest.get(chart)
            if drawing and before is not None and before != name:  # another rank is the slowest: old line emptied
                out.append((chart, before, color(3), "solid", np.zeros(0, np.float32), np.zeros(0, np.float32)))
            if drawing:
                self.slowest[chart] = name
            px, py = slow.curves[which].points(points)
            out.append((chart, name, color(3), "solid", narrow(px), narrow(py)))
        return out

    def panels(self, points: int) -> list[tuple[str, list[LineData]]]:
        """The two charts as the static picture draws them: (title, lines), the same lines."""
        lines = self.all_lines(points, drawing=False)
        return [(title, [ln for ln in lines if ln[0] == chart]) for chart, title in CHARTS
                if any(ln[0] == chart for ln in lines)]
