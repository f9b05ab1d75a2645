"""Scripted faults for the simulated backend, from Python or from a one-line spec.

Spec (``GPU_WIDGETS_SIMULATED_FAULTS``), items separated by ``;``::

    lost:1@30-60                 GPU 1 stops answering from 30 s to 60 s after start
    lost:1@30                    ... and never comes back
    throttle:0@20-40             GPU 0 throttles (hardware thermal slowdown) from 20 s to 40 s
    throttle:0@20-40:sw_power_cap   ... held at its power cap instead
    unsupported:0:fan_percent    GPU 0 never reports its fan speed
    small_kernels:0@10-70        GPU 0 runs a loop of tiny kernels: busy ~98 %, SMs active ~6 %

Times are seconds since the backend opened, not wall-clock time like the simulated readings: a
fault shows only in the process that scripted it, at the same point of every run (the tests and
scripts/screenshots.py rely on that). GPU is an index.
"""
from __future__ import annotations

from dataclasses import dataclass

from ..metrics.fields import SAMPLE_FIELDS
from ..metrics.throttle import BITS as THROTTLE_BITS
from ..metrics.throttle import NAMES as THROTTLE_NAMES

KINDS = ("lost", "throttle", "unsupported", "small_kernels")
SYNTAX = (
    "expected KIND:GPU[@START[-END]][:ARG] items separated by ';', e.g. "
    "'lost:1@30-60; throttle:0@20-40:sw_power_cap; unsupported:0:fan_percent; small_kernels:0@10-70' "
    f"(KIND is one of {', '.join(KINDS)})"
)
_FIELD_NAMES = tuple(f.name for f in SAMPLE_FIELDS)


@dataclass(frozen=True)
class Fault:
    kind: str
    gpu: int
    start_s: float = 0.0
    end_s: float | None = None  # None: until the end
    arg: str | None = None  # throttle reason name, or the unsupported field

    def __post_init__(self) -> None:
        if self.kind not in KINDS:
            raise ValueError(f"unknown fault kind {self.kind!r}: use one of {', '.join(KINDS)}")
        if self.gpu < 0:
            raise ValueError(f"fault GPU index must be >= 0, got {self.gpu}")
        if self.end_s is not None and self.end_s <= self.start_s:
            raise ValueError(f"fault end ({self.end_s} s) must come after its start ({self.start_s} s)")
        if self.kind == "throttle" and self.arg is not None and self.arg not in THROTTLE_NAMES:
            raise ValueError(f"unknown throttle reason {self.arg!r}: use one of {', '.join(THROTTLE_NAMES)}")
        if self.kind == "unsupported" and self.arg not in _FIELD_NAMES:
            raise ValueError(
                f"'unsupported' needs a sample field, got {self.arg!r}: use one of {', '.join(_FIELD_NAMES)}"
            )

    @property
    def throttle_bit(self) -> int:
        """NVML's bit for a throttle fault's reason (hardware thermal slowdown when none is named)."""
        return THROTTLE_BITS[self.arg or "hw_thermal_slowdown"] if self.kind == "throttle" else 0

    def active(self, elapsed_s: float) -> bool:
        return elapsed_s >= self.start_s and (self.end_s is None or elapsed_s < self.end_s)


def parse_faults(spec: str | None) -> tuple[Fault, ...]:
    """Parse a fault spec; raises ValueError naming the bad item and the syntax."""
    if not spec or not spec.strip():
        return ()
    faults = []
    for item in spec.split(";"):
        item = item.strip()
        if item:
            try:
                faults.append(_parse_item(item))
            except ValueError as exc:
                raise ValueError(f"bad simulated fault {item!r}: {exc}; {SYNTAX}") from None
    return tuple(faults)


def _parse_item(item: str) -> Fault:
    parts = item.split(":")
    if len(parts) < 2:
        raise ValueError("missing ':GPU'")
    kind, target = parts[0].strip(), parts[1].strip()
    arg = ":".join(parts[2:]).strip() or None
    when = None
    if "@" in target:
        target, when = target.split("@", 1)
    try:
        gpu = int(target)
    except ValueError:
        raise ValueError(f"GPU must be an index, got {target!r}") from None
    start, end = 0.0, None
    if when is not None:
        lo, sep, hi = when.partition("-")
        try:
            start = float(lo)
            end = float(hi) if sep else None
        except ValueError:
            raise ValueError(f"time must be START or START-END in seconds, got {when!r}") from None
    return Fault(kind, gpu, start, end, arg)
