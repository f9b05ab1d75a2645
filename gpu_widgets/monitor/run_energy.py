"""The energy a run's GPUs used, as the monitor's header shows it.

Only the GPUs the run uses count: a process that uses none (``gpus="auto"`` fell back to every GPU
of the machine, PyTorch never started CUDA, no tensor reached a GPU) is told so, with no figure:
those GPUs' energy is other people's work. Per GPU the energy is the difference of NVML's energy
counter between the run's first and last sample; a counter that has not moved yet (one sample,
or a run shorter than the driver's update period) is "n/a", never "0 J".
"""
from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from ..runs.gpu_trace import DeviceTrace
from ..widgets import units

NO_GPU = "no GPU used"
TOO_SHORT = "n/a"


@dataclass(frozen=True)
class RunEnergy:
    joules: float | None  # None: no figure
    text: str | None  # what the header shows; None: nothing (no GPU has an energy counter)
    why: str | None = None  # said after the text: why there is no figure

    @property
    def shown(self) -> bool:
        return self.text is not None


def measured(d: DeviceTrace) -> float | None:
    """Joules between the first and last sample, when the counter moved in between."""
    if d.energy_first is None or d.energy_last is None or d.energy_last == d.energy_first:
        return None
    return d.energy_j


def run_energy(devices: Sequence[DeviceTrace], uses_no_gpu: bool) -> RunEnergy:
    if uses_no_gpu:
        return RunEnergy(None, NO_GPU)  # the GPUs shown are the machine's: their energy is others' work
    counted = [d for d in devices if d.energy_first is not None]
    if not counted:
        return RunEnergy(None, None)
    joules = [j for j in map(measured, counted) if j is not None]
    if not joules:
        return RunEnergy(None, TOO_SHORT, "too short to measure")  # the energy counters have not moved yet
    total = sum(joules)
    return RunEnergy(total, units.energy(total))
