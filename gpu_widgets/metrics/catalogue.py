"""The metric catalogue: every GPU metric that is drawn or summarised, said once.

Each entry names the sample field it reads, how a value reads (unit, scale, digits), the words
people see (label, chart title, help), the y range of its chart, and which views show it. The
server serves it (``GET /gpu-widgets/api/metrics``) so the sidebar keeps no copy; the
TrainingMonitor, GpuDashboard, ``%%gpuwatch`` summaries and the static PNG read it directly.
Adding a metric starts here (docs/architecture.md, "Adding a GPU metric").
"""
from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from . import throttle

# The views that draw or summarise metrics.
SIDEBAR = "sidebar"  # a card row and a history chart per GPU in the JupyterLab sidebar
MONITOR = "monitor"  # a GPU chart beside the loss curves in TrainingMonitor (and its static PNG)
DASHBOARD = "dashboard"  # a chart in GpuDashboard (the inline dashboard and ``%gpuwatch``)
SUMMARY = "summary"  # a figure in the ``%%gpuwatch`` cell summary
VIEWS: tuple[str, ...] = (SIDEBAR, MONITOR, DASHBOARD, SUMMARY)

GIB = float(1 << 30)
TEMPERATURE_FLOOR_C = 20.0


@dataclass(frozen=True)
class Metric:
    id: str  # stable: the sidebar's ``metrics`` setting, chart keys, JSON
    field: str  # the device-sample field it reads (gpu_widgets.metrics.fields)
    label: str  # short words for people: "GPU busy"
    unit: str  # the unit shown: "%", "GiB", "°C", "W"
    help: str  # one sentence: what the number means (tooltips, docs)
    scale: float = 1.0  # value shown = field value * scale (bytes -> GiB)
    decimals: int = 0  # digits after the point when a value is printed
    y_min: float | None = 0.0  # None: the chart fits the data
    y_max: float | None = None  # a fixed top; None: fit the data (or follow ``y_max_field``)
    # The chart's top follows this field (memory total, power limit): a full chart means "at the limit".
    y_max_field: str | None = None
    views: frozenset[str] = frozenset(VIEWS)

    @property
    def title(self) -> str:
        """The chart title, the same in every view: "GPU busy (%)"."""
        return f"{self.label} ({self.unit})"

    def value(self, raw: float | None) -> float | None:
        """A field value in the metric's unit (None stays None)."""
        return None if raw is None else raw * self.scale

    def text(self, raw: float | None) -> str:
        """A field value as people read it: "37.2 GiB"; "n/a" when unknown."""
        v = self.value(raw)
        return "n/a" if v is None else f"{v:.{self.decimals}f} {self.unit}"

    def top(self, limits: Iterable[float | None]) -> float | None:
        """The chart's top in the metric's unit: ``y_max``, else the largest of the GPUs' latest
        ``y_max_field`` values (memory total, power limit); None (fit the data) when neither is known."""
        if self.y_max is not None or self.y_max_field is None:
            return self.y_max
        known = [v for v in limits if isinstance(v, (int, float)) and v > 0]
        return self.value(max(known)) if known else None

    def as_json(self) -> dict[str, Any]:
        return {
            "id": self.id,
            "field": self.field,
            "label": self.label,
            "title": self.title,
            "unit": self.unit,
            "help": self.help,
            "scale": self.scale,
            "decimals": self.decimals,
            "y_min": self.y_min,
            "y_max": self.y_max,
            "y_max_field": self.y_max_field,
            "views": [v for v in VIEWS if v in self.views],
        }


# Display order: the order of cards' rows, charts and summary figures.
METRICS: tuple[Metric, ...] = (
    Metric(
        "utilization", "utilization_gpu_percent", "GPU busy", "%",
        "Share of the last sample period in which a kernel ran on the GPU (NVML \"gpu\").",
        y_max=100.0,
    ),
    # GPM (Hopper or newer, read while someone looks): what "busy" cannot tell, how much of the
    # GPU the kernels fill. Right after busy, so the two read side by side.
    Metric(
        "sm_active", "sm_active_percent", "SM active", "%",
        "Share of the GPU's streaming multiprocessors (SMs) that had work, averaged over time (NVML GPM). "
        "\"Busy\" only says that some kernel ran: one tiny kernel makes it 100 % while SM active stays low.",
        y_max=100.0,
    ),
    Metric(
        "tensor_active", "tensor_active_percent", "Tensor active", "%",
        "Share of time the tensor cores were working, any precision (NVML GPM). Low while SMs are active: "
        "the math does not use them (float32 without TF32, or not matrix work).",
        y_max=100.0, views=frozenset({SIDEBAR, MONITOR, SUMMARY}),
    ),
    Metric(
        "memory", "memory_used_bytes", "GPU memory", "GiB",
        "Device memory in use, against the memory in total.",
        scale=1.0 / GIB, decimals=1, y_max_field="memory_total_bytes",
    ),
    Metric(
        "memory_controller", "utilization_memory_percent", "Memory controller busy", "%",
        "Share of the last sample period in which device memory was read or written (NVML \"memory\"); "
        "not how full memory is.",
        y_max=100.0, views=frozenset({SIDEBAR}),
    ),
    Metric(
        "temperature", "temperature_c", "GPU temperature", "°C",
        "GPU core temperature, against the temperature at which the GPU slows down to cool.",
        # From a floor below any working GPU's temperature to its slowdown limit: a degree of
        # noise stays small, and a line near the top means "about to throttle".
        y_min=TEMPERATURE_FLOOR_C, y_max_field="temperature_slowdown_c",
    ),
    Metric(
        "power", "power_w", "GPU power", "W",
        "Power draw, against the enforced power limit.",
        decimals=0, y_max_field="power_limit_w",
    ),
)


def metric(metric_id: str) -> Metric:
    # A scan, not a dict built at import: a test (or a plug-in) may extend METRICS.
    for m in METRICS:
        if m.id == metric_id:
            return m
    raise KeyError(f"no metric {metric_id!r}: the catalogue has {', '.join(m.id for m in METRICS)}")


def shown_in(view: str) -> tuple[Metric, ...]:
    """The metrics a view shows, in display order."""
    if view not in VIEWS:
        raise ValueError(f"no view {view!r}: use one of {', '.join(VIEWS)}")
    return tuple(m for m in METRICS if view in m.views)


def catalogue_json() -> dict[str, Any]:
    """What ``GET /gpu-widgets/api/v1/metrics`` answers: the metrics, then the throttle reasons' words."""
    return {
        "metrics": [m.as_json() for m in METRICS],
        "throttle_reasons": [
            {"name": name, "label": label, "slowdown": name in throttle.SLOWDOWNS}
            for _, name, label in throttle.REASONS
        ],
    }
