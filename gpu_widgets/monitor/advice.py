"""Advice from what a run measured: short sentences that say what to try and why.

Batch size: memory = a part that does not depend on the batch (weights, gradients, optimizer
state: taken as the least PyTorch had allocated during the run) + a part per sample (activations).
From the peak and the batch size that gives memory per sample; the largest batch that fits is the
one whose estimate stays within the GPU's memory minus what other processes use, minus a margin.
Without PyTorch's allocator figures, all of the GPU's memory is taken to grow with the batch,
which can only under-estimate the batch that fits.
"""
from __future__ import annotations

import sys
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from ..runs.gpu_trace import DeviceTrace
from ..widgets.units import gib

MIN_SAMPLES = 10
NEAR_OOM = 0.95
MARGIN = 0.10  # of the GPU's memory, kept free (fragmentation, a longer sequence, eval mode)
LOW_UTIL = 50.0
IDLE_UTIL = 10.0
MAX_FACTOR = 16  # never suggest more than this many times the current batch
# PyTorch's CUDA wheel indices, newest first, with the driver's CUDA version each needs.
CUDA_WHEELS = (("cu128", (12, 8)), ("cu126", (12, 6)), ("cu124", (12, 4)), ("cu121", (12, 1)), ("cu118", (11, 8)))


@dataclass(frozen=True)
class Advice:
    kind: str  # "memory", "batch", "utilization", "cpu", "cpu-build"; data_wait adds its diagnoses
    text: str


@dataclass(frozen=True)
class MemoryFacts:
    gpu: int
    total_bytes: float
    peak_bytes: float  # the most the batch-driven memory reached
    fixed_bytes: float  # memory that does not grow with the batch (0 when unknown)
    others_bytes: float  # memory of other processes and the CUDA context, when known apart
    from_torch: bool


def _round_down(n: int) -> int:
    for step in (64, 8):
        if n >= 2 * step:
            return n - n % step
    return n


def batch_advice(batch_size: int, m: MemoryFacts, margin: float = MARGIN) -> Advice | None:
    per_sample = (m.peak_bytes - m.fixed_bytes) / batch_size
    if per_sample <= 0:
        return None
    usable = m.total_bytes * (1 - margin) - m.others_bytes
    fits = int((usable - m.fixed_bytes) // per_sample)
    if m.from_torch:
        how = (
            f"PyTorch's peak on GPU {m.gpu} was {gib(m.peak_bytes)} with batch size {batch_size}: "
            f"{gib(m.fixed_bytes)} that does not depend on the batch (the least allocated during the run: "
            f"weights, gradients, optimizer state) + {gib(per_sample)} per sample"
        )
    else:
        how = (
            f"GPU {m.gpu}'s memory peaked at {gib(m.peak_bytes)} with batch size {batch_size}, taken as "
            f"{gib(per_sample)} per sample (PyTorch's figures were not available, so all of it is counted "
            "as growing with the batch: the estimate is on the safe side)"
        )
    room = f"{gib(m.total_bytes)} total"
    if m.others_bytes > 0:
        room += f" − {gib(m.others_bytes)} used by other processes and the CUDA context"
    room += f" − a {margin:.0%} margin = {gib(usable)} usable"
    if fits < batch_size:
        return Advice("batch", f"Batch size {batch_size} is more than fits with a margin: about {max(1, fits)} would. "
                               f"Estimate: {how}; {room}.")
    if fits < batch_size * 1.25:
        return None  # already close to the best
    suggestion = _round_down(min(fits, batch_size * MAX_FACTOR))
    capped = " (or more; not estimated beyond 16×)" if fits > batch_size * MAX_FACTOR else ""
    return Advice(
        "batch",
        f"Batch size about {suggestion}{capped} would fit. Estimate: {how}; {room}. "
        "A larger batch usually raises throughput; scale the learning rate with it.",
    )


def advise(
    *,
    samples: int,
    batch_size: int | None,
    memory: MemoryFacts | None,
    util_mean: float | None,
    cpu_training: bool = False,
    idle_gpus: Sequence[int] = (),
    busy_gpus: Sequence[int] = (),
) -> list[Advice]:
    if cpu_training:
        return [cpu_advice(idle_gpus, busy_gpus)]
    if samples < MIN_SAMPLES:
        return []
    out: list[Advice] = []
    if memory is not None and memory.peak_bytes + memory.others_bytes >= NEAR_OOM * memory.total_bytes:
        out.append(
            Advice(
                "memory",
                f"GPU {memory.gpu}'s memory reached {(memory.peak_bytes + memory.others_bytes) / memory.total_bytes:.0%} "
                f"of {gib(memory.total_bytes)}: close to out-of-memory. A smaller batch, mixed precision "
                "(torch.autocast) or gradient accumulation gives room.",
            )
        )
    if util_mean is not None and util_mean < LOW_UTIL:
        out.append(
            Advice(
                "utilization",
                f"The GPU was busy {util_mean:.0f}% of the time on average: the loop waits on something else "
                "(data loading, Python work, copies to the GPU). More DataLoader workers, pin_memory=True "
                "or a larger batch usually help.",
            )
        )
    if batch_size and memory is not None:
        tip = batch_advice(batch_size, memory)
        if tip is not None:
            out.append(tip)
    return out


def gpu_list(indices: Sequence[int]) -> str:
    """GPUs as a sentence names them: "GPU 1", "GPUs 1 and 6", "GPUs 0, 2 and 5"."""
    if len(indices) <= 1:
        return f"GPU {indices[0]}" if indices else "no GPU"
    *head, last = (str(i) for i in indices)
    return f"GPUs {', '.join(head)} and {last}"


def cpu_advice(idle_gpus: Sequence[int], busy_gpus: Sequence[int] = ()) -> Advice:
    idle = gpu_list(idle_gpus) if idle_gpus else ""
    stay = "stays" if len(idle_gpus) <= 1 else "stay"
    busy = gpu_list(busy_gpus) if busy_gpus else ""
    share = "which it can share" if len(busy_gpus) == 1 else "which they can share"
    if busy:  # someone else's work: a GPU can run two jobs, and even a shared GPU beats the CPU
        where = f"{idle} {stay} idle and {busy} could run it too (busy with other work, {share})" if idle \
            else f"{busy} could run it (busy with other work, {share})"
    else:
        where = f"{idle or 'the GPU'} {stay} idle"
    return Advice("cpu", f"Training runs on the CPU: the tensors this monitor sees are on the CPU while {where}. "
                         "Move the model and each batch to the GPU: model.to('cuda'), x.to('cuda').")


def torch_without_cuda() -> str | None:
    """The version of an imported PyTorch built without CUDA ("2.5.1+cpu"), else None."""
    torch = sys.modules.get("torch")
    version = getattr(torch, "version", None)
    if torch is None or version is None or not hasattr(version, "cuda"):
        return None
    try:
        return None if version.cuda else str(getattr(torch, "__version__", "?"))
    except Exception:  # an odd torch must not break the header
        return None


def wheel_index(cuda_driver: str | None) -> str:
    """The PyTorch wheel index for the newest CUDA the driver runs ("12.4" -> cu124), else cu126."""
    try:
        major, minor = (int(x) for x in str(cuda_driver).split(".")[:2])
    except ValueError:
        return "cu126"
    return next((tag for tag, need in CUDA_WHEELS if (major, minor) >= need), "cu118")


def cpu_build_advice(version: str, gpus: Sequence[int], cuda_driver: str | None) -> Advice:
    which = gpu_list(gpus)
    index = wheel_index(cuda_driver)
    return Advice(
        "cpu-build",
        f"PyTorch cannot use the GPU: this PyTorch ({version}) was built without CUDA (torch.version.cuda is None), "
        f"and NVML sees {len(gpus)} NVIDIA GPU{'s' if len(gpus) != 1 else ''} here ({which}). Training runs on the "
        f"CPU. Install a CUDA build, then restart the kernel: pip install --force-reinstall torch "
        f"--index-url https://download.pytorch.org/whl/{index}",
    )


def memory_facts(devices: Iterable[DeviceTrace]) -> MemoryFacts | None:
    """The memory figures of the GPU closest to its limit (PyTorch's allocator figures when torch
    uses that GPU: other processes' memory then counts apart)."""
    best: MemoryFacts | None = None
    for d in devices:
        total = d.memory_total
        if not total:
            continue
        latest = d.latest
        if d.torch_peak_allocated is not None:
            reserved = latest.get("torch_reserved_bytes") or 0
            used = latest.get("memory_used_bytes") or 0
            facts = MemoryFacts(d.index, total, d.torch_peak_allocated, d.torch_allocated_min or 0.0,
                                max(0.0, used - reserved), True)
        elif d.memory_peak is not None:
            facts = MemoryFacts(d.index, total, d.memory_peak, 0.0, 0.0, False)
        else:
            continue
        if best is None or (facts.peak_bytes + facts.others_bytes) / total > (best.peak_bytes + best.others_bytes) / best.total_bytes:
            best = facts
    return best


def advice_for_run(devices: Sequence[DeviceTrace], batch_size: int | None, *, cpu_tensors_only: bool,
                   gpus_present: bool, torch_cuda: bool | None = None, cpu_build: str | None = None,
                   cuda_driver: str | None = None) -> list[Advice]:
    """``cpu_tensors_only``: PyTorch is imported and no tensor the monitor saw was on a GPU.
    ``torch_cuda``: whether PyTorch initialised CUDA in this process (None: torch not imported).
    ``cpu_build``: the version of an imported PyTorch built without CUDA (torch_without_cuda)."""
    utils = [d.util_mean for d in devices if d.util_mean is not None]
    util_mean = sum(utils) / len(utils) if utils else None
    samples = max((d.samples for d in devices), default=0)
    if cpu_build and gpus_present and devices:
        # No move to 'cuda' can work with this build: the fix is another PyTorch, and nothing else matters.
        return [cpu_build_advice(cpu_build, [d.index for d in devices], cuda_driver)]
    idle = [d.index for d in devices if d.util_mean is not None and d.util_mean < IDLE_UTIL]
    # Usable but busy: other processes' work, not ours when this process never started CUDA.
    busy = [d.index for d in devices if d.util_mean is not None and d.util_mean >= IDLE_UTIL and usable(d)]
    all_idle = bool(idle) and len(idle) == len(utils)
    cpu_training = cpu_tensors_only and gpus_present and samples >= 3 and (
        all_idle or (torch_cuda is False and bool(idle or busy)))
    return advise(samples=samples, batch_size=batch_size, memory=memory_facts(devices), util_mean=util_mean,
                  cpu_training=cpu_training, idle_gpus=idle, busy_gpus=[] if all_idle else busy)


def usable(d: DeviceTrace) -> bool:
    """Room for another job: its memory is not (nearly) full."""
    used, total = d.latest.get("memory_used_bytes"), d.latest.get("memory_total_bytes") or d.memory_total
    return not (used and total) or used < NEAR_OOM * total
