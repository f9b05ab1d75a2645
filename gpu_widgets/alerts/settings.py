"""The alerts' settings, as traits the server extension's app inherits (``c.GpuWidgets.<name>``).

Checked when the extension starts (``alert_engine``): a bad value turns the alerts off with a
message that names the setting (logged, and served by the alerts endpoint as ``problem``), while
the rest of the extension loads as usual.
"""
from __future__ import annotations

import logging
import math
from collections.abc import Callable, Mapping
from typing import Any

from traitlets import Bool, Float, HasTraits, Unicode

from ..settings_check import check_number, shown
from .engine import AlertEngine
from .rules import Thresholds

GPU_CHOICES = ("all", "mine")
MAX_MARGIN_C = 50.0
MAX_THROTTLE_S = 86400.0


# field of Thresholds -> (is the value allowed, the rule in words); never infinite
NUMBERS: dict[str, tuple[Callable[[float], bool], str]] = {
    "temperature_margin_c": (lambda v: 0 <= v <= MAX_MARGIN_C, f"within 0-{MAX_MARGIN_C:g} °C"),
    "throttle_s": (lambda v: 0 <= v <= MAX_THROTTLE_S, f"within 0-{MAX_THROTTLE_S:g} s"),
    "memory_percent": (lambda v: 0 < v <= 100, "more than 0 and at most 100"),
    "idle_kernel_memory_gib": (lambda v: 0 < v < math.inf, "more than 0 GiB"),
    "idle_minutes": (lambda v: 0 < v < math.inf, "more than 0 minutes"),
}
FIELDS = (*NUMBERS, "gpus")


def check_thresholds(values: Mapping[str, Any], name: Callable[[str], str]) -> Thresholds:
    """Thresholds from every field of ``values``, checked; a ValueError says which (``name(field)``
    words it: the trait for the server's config, the JSON field for the settings endpoint)."""
    checked = {field: check_number(name(field), values[field], ok, rule) for field, (ok, rule) in NUMBERS.items()}
    gpus = values["gpus"]
    if not isinstance(gpus, str) or gpus.strip().lower() not in GPU_CHOICES:
        raise ValueError(f"{name('gpus')} must be 'all' or 'mine', got {shown(gpus)}")
    return Thresholds(**checked, gpus=gpus.strip().lower())


class AlertSettings(HasTraits):
    alerts_enabled = Bool(
        True,
        help="Decide alerts on the server (temperature near the slowdown limit, throttled by heat or power, "
        "memory nearly full, a GPU lost, an idle GPU whose memory a kernel holds) and serve them at "
        "{base_url}gpu-widgets/api/v1/alerts for every open tab. False: no evaluation at all.",
    ).tag(config=True)
    alert_temperature_margin_c = Float(
        5.0,
        help=f"Alert when a GPU is within this many °C of its slowdown temperature (0-{MAX_MARGIN_C:g}); "
        "90 °C stands in for a GPU that does not tell its own.",
    ).tag(config=True)
    alert_throttle_s = Float(
        30.0,
        help="Alert when a GPU has been slowed down by heat or power (thermal, power-cap, power-brake or "
        "hardware slowdown clock reasons) for more than this many seconds (0: at once).",
    ).tag(config=True)
    alert_memory_percent = Float(
        95.0, help="Alert when a GPU's memory is at least this full, in percent (more than 0, at most 100)."
    ).tag(config=True)
    alert_idle_kernel_memory_gib = Float(
        1.0,
        help="Alert when one of this server's kernels holds at least this many GiB on a GPU that has been idle "
        "(busy under 5 %) for alert_idle_minutes.",
    ).tag(config=True)
    alert_idle_minutes = Float(
        10.0, help="Minutes a GPU must stay idle before a kernel holding its memory is reported (more than 0)."
    ).tag(config=True)
    alert_gpus = Unicode(
        "all",
        help="Which GPUs alerts watch: 'all' (every GPU of the machine) or 'mine' (only the GPUs on which "
        "processes of this server's kernels were seen).",
    ).tag(config=True)

    def alert_thresholds(self) -> Thresholds:
        """The settings as one value; a ValueError names the setting that is wrong and why."""
        values = {field: getattr(self, f"alert_{field}") for field in NUMBERS}
        return check_thresholds({**values, "gpus": self.alert_gpus}, lambda field: f"GpuWidgets.alert_{field}")

    def alert_engine(self, log: logging.Logger) -> AlertEngine:
        """The alert engine; with bad settings, one that is off and says why (logged once, here)."""
        try:
            limits = self.alert_thresholds()
        except ValueError as exc:
            problem = f"{exc}. Alerts are off until the setting is fixed and the server restarted"
            log.error("gpu-widgets alerts: %s", problem)
            return AlertEngine(enabled=False, problem=problem)
        return AlertEngine(limits, enabled=self.alerts_enabled)
