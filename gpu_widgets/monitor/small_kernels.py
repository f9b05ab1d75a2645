"""The small-kernels diagnosis: a GPU "busy" nearly all the time while few of its SMs work.

NVML's busy figure counts the time in which *some* kernel ran, so a loop of tiny kernels (a small
batch, many unfused element-wise ops, launch-bound Python) reads as 100 %. GPM's SM activity says
how much of the GPU those kernels filled. Both high: the GPU is used. Busy high and SM activity
low: the kernels are too small for this GPU. Without SM activity (no GPM: pre-Hopper, or not read)
nothing is said: busy alone cannot tell the two apart.
"""
from __future__ import annotations

from collections.abc import Sequence

from ..runs.gpu_trace import DeviceTrace
from .advice import Advice

BUSY_AT_LEAST = 90.0
SM_ACTIVE_AT_MOST = 20.0
# SM activity is read on the slow cadence (every 2 s) while someone looks: 30 s gives it a
# dozen readings, enough that one odd interval does not decide.
RECENT_S = 30.0
MIN_SAMPLES = 5  # samples with both figures known


def recent_pairs(d: DeviceTrace, window_s: float = RECENT_S) -> list[tuple[float, float]]:
    """(busy, SM active) of the GPU's samples in the last ``window_s`` where both are known."""
    busy, sm = d.columns.get("utilization_gpu_percent"), d.columns.get("sm_active_percent")
    if busy is None or sm is None or not len(d.times):
        return []
    end = d.times[-1]
    i = len(d.times)
    while i > 0 and d.times[i - 1] >= end - window_s:
        i -= 1
    return [(b, s) for b, s in zip(busy[i:], sm[i:]) if b == b and s == s]  # NaN: not read


def small_kernels(devices: Sequence[DeviceTrace], window_s: float = RECENT_S) -> Advice | None:
    """The advice for the first GPU whose recent samples are busy but SM-idle; None for a
    healthy run, too few samples, or SM activity unknown."""
    for d in devices:
        pairs = recent_pairs(d, window_s)
        if len(pairs) < MIN_SAMPLES:
            continue
        busy = sum(b for b, _ in pairs) / len(pairs)
        sm = sum(s for _, s in pairs) / len(pairs)
        if busy >= BUSY_AT_LEAST and sm <= SM_ACTIVE_AT_MOST:
            return Advice(
                "small-kernels",
                f"GPU {d.index}: busy {busy:.0f} % but SMs active {sm:.0f} %: the kernels are too small to fill "
                "this GPU (batch size, fusing, CUDA graphs). A larger batch, fused ops (torch.compile) or "
                "CUDA graphs give each launch more work.",
            )
    return None
