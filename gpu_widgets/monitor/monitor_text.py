"""The TrainingMonitor's header as HTML: status, progress, latest values, alerts, its GPUs, the
diagnosis and advice, problems. The pieces (badges, stats, GPU cards) are the widgets' (header);
pure functions of plain data, so tests read exactly what a user reads, and everything that came
from the user or the system is escaped.
"""
from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from html import escape
from typing import Any

from ..metrics.catalogue import MONITOR, shown_in
from ..runs.gpu_trace import DeviceTrace
from ..widgets import units
from ..widgets.drawable import short_title
from ..widgets.gpu_cards import device_line
from ..widgets.gpu_summary import from_trace, summary_html
from ..widgets.gpu_table import MAX_CARDS, trace_rows
from ..widgets.header import backend_line, badge, gpus_html, known_somewhere, stat, torch_line
from ..widgets.torch_probe import TorchState
from .advice import Advice
from .data_wait import WINDOW_STEPS

STATUS_HINTS = {
    "idle": "the cell ended without finish(); log() continues the run, finish() ends it",
    "unfinished": "the log has no end: the process stopped without finishing (or is still running)",
}


@dataclass
class MonitorText:
    """What the training monitor's header shows; filled by the monitor on its thread."""

    title: str
    status: str
    status_detail: str | None = None
    steps_done: int | None = None  # a count, not the last step's number (monitor_header.steps_done)
    rows: int = 0
    total_steps: int | None = None
    epoch: str | None = None
    elapsed_s: float | None = None
    steps_per_s: float | None = None
    samples_per_s: float | None = None
    energy_j: float | None = None
    energy_text: str | None = None  # shown instead of energy_j when the run has no figure (run_energy)
    energy_why: str | None = None
    latest: Mapping[str, Any] = field(default_factory=dict)
    nonfinite: Mapping[str, tuple[float, float, int]] = field(default_factory=dict)  # key -> (step, value, count)
    backend: str | None = None
    backend_status: str | None = None
    backend_reason: str | None = None
    config_error: str | None = None
    devices: Sequence[DeviceTrace] = ()
    torch: TorchState | None = None
    advice: Sequence[Advice] = ()
    errors: Sequence[str] = ()
    notes: Sequence[str] = ()
    run_dir: str | None = None
    summary: bool = False  # many GPUs, none this process's: one summary card (gpu_summary)
    data_wait: float | None = None  # share of recent step time spent waiting for data (data_wait)
    diagnosis: Advice | None = None  # input-bound or CPU-bound (data_wait.diagnose)
    alerts: Sequence[tuple[str, str]] = ()  # (severity, line) of each open alert (monitor_alerts)
    alerts_ended: int = 0  # alerts that ended this run
    alerts_problem: str | None = None
    world: str | None = None  # a launch's ranks, and its straggler (world.World.line)
    straggler: bool = False  # that line names one


def rate_number(per_s: float) -> str:
    """units.rate's number without its unit (the label says it)."""
    return units.rate(per_s, "_").rsplit(" ", 1)[0]


def progress_html(t: MonitorText) -> str:
    progress = []
    if t.steps_done is not None:
        total = f" / {t.total_steps:,}" if t.total_steps else ""
        share = f"({min(1.0, t.steps_done / t.total_steps):.0%})" if t.total_steps else ""
        progress.append(stat("step", f"{t.steps_done:,}{total}", share))
    if t.epoch:
        progress.append(stat("epoch", t.epoch))
    if t.steps_per_s:
        progress.append(stat("steps/s", rate_number(t.steps_per_s)))
    if t.samples_per_s:
        progress.append(stat("samples/s", rate_number(t.samples_per_s)))
    if t.data_wait is not None:
        # Over the last 50 steps; the data-wait chart's "now" is its latest half second.
        progress.append(stat("data wait", f"{100 * t.data_wait:.0f} %", f"last {WINDOW_STEPS} steps"))
    if t.elapsed_s is not None:
        progress.append(stat("elapsed", units.duration(t.elapsed_s)))
    if t.total_steps and t.steps_per_s and t.steps_done is not None and t.status == "running":
        left = max(0, t.total_steps - t.steps_done) / t.steps_per_s
        progress.append(stat("ETA", units.duration(left)))
    if t.energy_j is not None:
        progress.append(stat("energy", units.energy(t.energy_j)))
    elif t.energy_text:
        progress.append(stat("energy", t.energy_text, t.energy_why or ""))
    # Spaces between the flex items: nothing on screen, but copied text and screen readers get words.
    return f'<div class="gpuw-row">{" ".join(progress)}</div>' if progress else ""


def alerts_html(t: MonitorText) -> str:
    """Open alerts, one short line each (an error's in the error colour), then how many ended."""
    out = [f'<div class="gpuw-alert {"gpuw-error" if severity == "error" else "gpuw-warn"}">{escape(text)}</div>'
           for severity, text in t.alerts]
    if t.alerts_ended:
        n = t.alerts_ended
        out.append(f'<div class="gpuw-muted gpuw-alert">{n} alert{"s" if n != 1 else ""} ended this run '
                   "(the bars along the top of their GPU charts)</div>")
    if t.alerts_problem:
        out.append(f'<div class="gpuw-muted">{escape(t.alerts_problem)}</div>')
    return "".join(out)


def render_monitor(t: MonitorText) -> str:
    backend_badge, backend_html = backend_line(t.backend, t.backend_status, t.backend_reason, t.config_error)
    lines = [f'<div><span class="gpuw-htitle">{escape(short_title(t.title))}</span> {badge(t.status, t.status)}{backend_badge}</div>']
    detail = t.status_detail or STATUS_HINTS.get(t.status)
    if detail:
        lines.append(f'<div class="{"gpuw-error" if t.status == "failed" else "gpuw-muted"}">{escape(detail)}</div>')
    lines.append(progress_html(t))
    if t.world:
        lines.append(f'<div class="{"gpuw-warn" if t.straggler else "gpuw-muted"} gpuw-world">{escape(t.world)}</div>')
    if t.latest:
        lines.append(f'<div class="gpuw-row">{" ".join(stat(k, units.value(v)) for k, v in t.latest.items())}</div>')
    for key, (step, value, count) in t.nonfinite.items():
        lines.append(
            f'<div class="gpuw-warn">{escape(key)} was {units.value(value)} at step {int(step):,}'
            f" (first of {count} non-finite value{'s' if count != 1 else ''}; not plotted)</div>"
        )
    lines.append(backend_html)
    lines.append(alerts_html(t))
    metrics = known_somewhere(shown_in(MONITOR), [d.latest for d in t.devices])
    if t.summary and t.devices:
        lines.append(summary_html([from_trace(d) for d in t.devices], metrics))
    else:
        torch_by_index = {d.nvml_index: d for d in (t.torch.devices if t.torch else ())}
        if len(t.devices) > MAX_CARDS:
            lines.append(trace_rows(t.devices, metrics, torch_by_index))
        else:
            lines.append(gpus_html([device_line(d, torch_by_index.get(d.index), metrics) for d in t.devices]))
    lines.append(torch_line(t.torch))
    if t.diagnosis is not None:  # "Input-bound: ..." with its first words in bold
        head, _, rest = t.diagnosis.text.partition(": ")
        lines.append(f'<div class="gpuw-warn gpuw-diagnosis"><b>{escape(head)}:</b> {escape(rest)}</div>')
    for a in t.advice:
        if a.kind == "cpu-build":  # no tip: nothing else works until PyTorch is replaced
            lines.append(f'<div class="gpuw-error"><b>Warning:</b> {escape(a.text)}</div>')
        else:
            lines.append(f"<div><b>Tip:</b> {escape(a.text)}</div>")
    if t.errors:
        more = f" (+{len(t.errors) - 1} more)" if len(t.errors) > 1 else ""
        lines.append(f'<div class="gpuw-error">monitor problem: {escape(t.errors[-1])}{more}; your loop is not affected</div>')
    for n in t.notes:
        lines.append(f'<div class="gpuw-muted">{escape(n)}</div>')
    if t.run_dir:
        lines.append(f'<div class="gpuw-muted">run log: {escape(t.run_dir)}</div>')
    return '<div class="gpuw-h gpu-widgets-monitor">' + "\n".join(x for x in lines if x) + "</div>"
