"""GPM figures and per-process use of the simulated GPUs: plausible, deterministic, and showing
why "busy" is not "used".

Training keeps most SMs active and the tensor cores busy; evaluation less so; loading and
checkpoints barely touch the SMs. The ``small_kernels`` episode (faults.py) is the lesson: busy
near 100 % while a loop of one-block kernels keeps SM activity under 10 %.
"""
from __future__ import annotations

from typing import Any, Callable

# Fractions of busy time per phase: (SM active, SM occupancy, tensor active, DRAM active).
_SHARES = {
    "train": (0.88, 0.42, 0.62, 0.55),
    "eval": (0.70, 0.30, 0.35, 0.40),
    "loading": (0.25, 0.08, 0.0, 0.20),
    "checkpoint": (0.30, 0.10, 0.0, 0.35),
    "idle": (0.0, 0.0, 0.0, 0.0),
}
SMALL_KERNELS = (0.06, 0.02, 0.005, 0.02)  # one block on 132 SMs: under 1 %, launch gaps and all
SMALL_KERNELS_BUSY = 98.0  # there is always a kernel running, so NVML's "busy" is near 100


def gpm_values(util: float, phase: str, small_kernels: bool, noise: Callable[[int], float]) -> dict[str, Any]:
    """The four GPM fields for a simulated GPU at one grid step; ``noise(salt)`` is in [-1, 1)."""
    shares = SMALL_KERNELS if small_kernels else _SHARES.get(phase, _SHARES["idle"])
    names = ("sm_active_percent", "sm_occupancy_percent", "tensor_active_percent", "dram_active_percent")
    out = {}
    for i, (name, share) in enumerate(zip(names, shares)):
        value = util * share * (1 + 0.03 * noise(10 + i)) if share else 0.0
        out[name] = round(min(100.0, max(0.0, value)), 1)
    return out


def process_use(values: dict[str, Any], share: float, on: bool, off_reason: str) -> dict[str, Any]:
    """A process's ``sm_percent``, ``memory_bandwidth_percent`` and ``unavailable`` when it does
    ``share`` of the GPU's work; null with ``off_reason`` while nobody looks."""
    if not on:
        return {"sm_percent": None, "memory_bandwidth_percent": None,
                "unavailable": {"sm_percent": off_reason, "memory_bandwidth_percent": off_reason}}
    return {"sm_percent": round(values["sm_active_percent"] * share, 1),
            "memory_bandwidth_percent": round(values["utilization_memory_percent"] * share, 1), "unavailable": {}}
