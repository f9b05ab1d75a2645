"""A profile's result: the verdict, its sentence and evidence, the step's time broken down, the
top ops. A live profile (``TrainingMonitor.profile()``) returns its ``Profile`` at once, with
``status`` "waiting" or "profiling", and fills it in when its steps are done (``wait()``)."""
from __future__ import annotations

import threading
from dataclasses import dataclass, field
from html import escape
from typing import Any

BREAKDOWN = ("data_wait", "cpu_ops", "gpu_kernels", "copies", "syncs", "idle")
BREAKDOWN_WORDS = {"data_wait": "data wait", "cpu_ops": "CPU ops / Python", "gpu_kernels": "GPU kernels",
                   "copies": "host-device copies", "syncs": "synchronisations", "idle": "idle gaps"}


class ProfileError(RuntimeError):
    """A profile that could not be made or read (its message says why)."""


@dataclass
class Profile:
    verdict: str | None = None
    sentence: str | None = None
    evidence: dict[str, Any] = field(default_factory=dict)
    breakdown: dict[str, float] = field(default_factory=dict)  # shares of the steps' wall time, summing to 1
    top_ops: list[dict[str, Any]] = field(default_factory=list)
    steps: int = 0
    trace_path: str | None = None  # the full trace, kept for Perfetto or TensorBoard (keep_trace=True)
    status: str = "done"  # "waiting" (for its first step), "profiling", "analysing", "done", "failed"
    error: str | None = None  # why it failed
    _done: threading.Event = field(default_factory=threading.Event, repr=False, compare=False)

    def __post_init__(self) -> None:
        if self.status in ("done", "failed"):
            self._done.set()

    def wait(self, timeout: float | None = None) -> bool:
        """Block until the profile is done or failed (True), or ``timeout`` seconds passed (False)."""
        return self._done.wait(timeout)

    @property
    def done(self) -> bool:
        return self._done.is_set()

    def fill(self, other: Profile, *, settle: bool = True) -> None:
        """This (pending) profile takes the result ``other`` holds, and is done (``settle=False``: not
        yet signalled; whoever fills it calls ``settle()`` once its own follow-up has run)."""
        for name in ("verdict", "sentence", "evidence", "breakdown", "top_ops", "steps", "trace_path"):
            setattr(self, name, getattr(other, name))
        self.status, self.error = "done", None
        if settle:
            self.settle()

    def failed(self, why: str, *, settle: bool = True) -> None:
        self.status, self.error = "failed", why
        if settle:
            self.settle()

    def settle(self) -> None:
        """Wake whoever waits on the profile: its result, and what was done with it, are in place."""
        self._done.set()

    def as_dict(self) -> dict[str, Any]:
        return {"verdict": self.verdict, "sentence": self.sentence, "evidence": dict(self.evidence),
                "breakdown": dict(self.breakdown), "top_ops": [dict(o) for o in self.top_ops],
                "steps": self.steps, "trace_path": self.trace_path, "status": self.status, "error": self.error}

    def __repr__(self) -> str:
        if self.status == "failed":
            return f"<Profile failed: {self.error}>"
        if self.status != "done":
            return f"<Profile {self.status}>"
        return f"<Profile {self.verdict} over {self.steps} step{'s' if self.steps != 1 else ''}: {self.sentence}>"

    def html(self) -> str:
        """The result as the monitor's widget shows it (classes of the monitor's header)."""
        if self.status == "failed":
            return f'<div class="gpuw-profile"><b>Profile failed</b>: {escape(self.error or "")}</div>'
        if self.status != "done":
            return f'<div class="gpuw-profile gpuw-muted">Profile: {escape(self.status)}…</div>'
        bars = " · ".join(
            f'<span title="{escape(BREAKDOWN_WORDS[k])}: {v:.0%}">{escape(BREAKDOWN_WORDS[k])} {v:.0%}</span>'
            for k, v in self.breakdown.items() if v >= 0.005)
        ops = "".join(
            f"<tr><td>{escape(o['name'][:80])}</td><td>{o['kind']}</td><td>{o['self_ms_per_step']:.2f} ms</td>"
            f"<td>{o['count_per_step']:g}</td></tr>" for o in self.top_ops[:5])
        where = f'<div class="gpuw-sub">trace: {escape(self.trace_path)}</div>' if self.trace_path else ""
        return (f'<div class="gpuw-profile"><div><b>Profile: {escape(self.verdict or "")}</b> · '
                f'{self.steps} step{"s" if self.steps != 1 else ""}</div><div>{escape(self.sentence or "")}</div>'
                f'<div class="gpuw-legend">{bars}</div>'
                f'<table class="gpuw-table"><tr><th>top op (self time)</th><th>on</th><th>per step</th>'
                f'<th>calls per step</th></tr>{ops}</table>{where}</div>')

    def _repr_html_(self) -> str:
        return self.html()
