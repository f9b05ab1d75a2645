"""``pick_gpus()``: choose the least used GPUs for this process and point CUDA at them.

Call it before anything in the process touches CUDA: CUDA reads ``CUDA_VISIBLE_DEVICES`` once, when
it initialises, so a choice made later could not take effect (it raises instead). How it chooses,
and why it writes what it writes: docs/pick_gpus.md.
"""
from __future__ import annotations

import math
import numbers
import os
import sys
import time
import warnings
from dataclasses import dataclass, field
from typing import Any

from .backends import OK, Backend, open_backend
from .backends.base import LOST
from .sampling.guarded import HungCall, run_guarded
from .sampling.snapshot import take
from .sampling.visibility import ACCEPTED, cuda_visible_indices, shown_setting

GIB = 1 << 30
# NVML's utilization is the share of the driver's last sample period (1/6 s to 1 s) in which a kernel
# ran, so a training loop waiting on its data loader can read 0 in one look. Two looks this far apart,
# keeping the higher figure, make a busy GPU much less likely to pass for an idle one.
LOOK_GAP_S = 0.5
ENV_VISIBLE = "CUDA_VISIBLE_DEVICES"
ENV_ORDER = "CUDA_DEVICE_ORDER"
PCI_ORDER = "PCI_BUS_ID"  # NVML numbers GPUs in PCI bus order; with this, CUDA's indices agree
# A hung driver call (a GPU falling off the bus, a wedged driver) blocks for ever; nvidia-smi
# hangs too. Reading every GPU twice takes about 0.6 s, opening NVML up to a few seconds on a
# machine without persistence mode.
DEFAULT_TIMEOUT_S = 5.0
# Bounds that keep every argument a plain float (10**400 would overflow) and every message short.
MAX_GPUS = 1024
MAX_MEMORY_GIB = 65536
MAX_TIMEOUT_S = 3600.0

# (what we wrote, what was there before): calling again with our own value in place chooses among the
# GPUs visible before the first call, so re-running a notebook cell with another n works.
_written: tuple[str, str | None] | None = None


class PickGpusError(RuntimeError):
    """pick_gpus() could not choose: too few GPUs qualify, no GPU here, or CUDA already started."""


@dataclass
class _Gpu:
    """One GPU as both looks saw it."""

    index: int
    uuid: str | None
    name: str | None
    busy_percent: float | None = None
    free_bytes: int | None = None
    others_bytes: int = 0  # memory that other processes hold on it
    others: int = 0
    others_unknown: int = 0  # of them, those whose memory is unknown (a container: docs/containers.md)
    pids: set[int] = field(default_factory=set)
    problem: str | None = None  # why it can never qualify (lost, MIG mode, hidden)
    unknown: dict[str, str] = field(default_factory=dict)  # field -> why it could not be read

    def describe(self) -> str:
        busy = "busy ?" if self.busy_percent is None else f"busy {self.busy_percent:g} %"
        free = "free ?" if self.free_bytes is None else f"{self.free_bytes / GIB:.1f} GiB free"
        many = self.others != 1
        least = "at least " if self.others_unknown else ""
        held = f", {self.others} other process{'es hold' if many else ' holds'} {least}{self.others_bytes / GIB:.1f} GiB"
        if self.others_unknown:
            held += f" ({self.others_unknown} of unknown size: the driver reports host pids)"
        return f"GPU {self.index} ({self.name or 'unnamed'}): {busy}, {free}{held if self.others else ''}"


def pick_gpus(n: int = 1, *, min_free_memory_gib: float | None = None,
              max_busy_percent: float | None = None, timeout_s: float = DEFAULT_TIMEOUT_S) -> list[int]:
    """Choose the ``n`` least used GPUs that qualify, make them this process's CUDA devices and return
    their NVML indices, best first (``result[i]`` is the GPU that ``cuda:i`` will be).

    Least used: least busy first (utilization), then most free memory, then the lower index.
    ``min_free_memory_gib``: a GPU qualifies only with at least this much memory free (other processes'
    memory counts as used). ``max_busy_percent``: only when at most this busy (0-100).
    ``timeout_s``: how long reading the GPUs may take (default 5 s) before it gives up on a hung
    driver call.

    Sets ``CUDA_DEVICE_ORDER=PCI_BUS_ID`` and ``CUDA_VISIBLE_DEVICES`` to the chosen indices, or to
    their UUIDs when ``CUDA_VISIBLE_DEVICES`` already named UUIDs. An existing ``CUDA_VISIBLE_DEVICES``
    is respected: only the GPUs it makes visible are candidates.

    Raises ``PickGpusError`` when fewer than ``n`` qualify (naming each GPU's failed condition and its
    values), when there is no GPU (with NVML's reason), when a driver call has not returned after
    ``timeout_s`` (naming it), or when CUDA was already initialised in this process; ``TypeError`` /
    ``ValueError`` (naming the argument) for bad arguments.
    """
    n, min_free, max_busy, timeout = _checked(n, min_free_memory_gib, max_busy_percent, timeout_s)
    _refuse_if_torch_started_cuda()
    before = _visible_setting()
    try:
        name, gpus, info = run_guarded(_read_gpus, timeout, name="gpu-widgets-pick")
    except HungCall as exc:
        raise PickGpusError(
            f"pick_gpus(): gave up after {timeout:g} s (timeout_s): {exc}. The NVIDIA driver is not answering "
            "(nvidia-smi would hang too); the call goes on in the background. Try again later, or check the "
            "GPU and its driver.") from None
    if name == "simulated":
        warnings.warn("pick_gpus() is choosing among SIMULATED GPUs (GPU_WIDGETS_BACKEND=simulated): "
                      "CUDA_VISIBLE_DEVICES will name GPUs that exist only in gpu-widgets", UserWarning,
                      stacklevel=2)
    _refuse_if_this_process_uses_a_gpu(gpus)
    _mark_mig(gpus, info)
    as_uuids = _restrict_to_visible(gpus, before)
    chosen = _choose(gpus, n, min_free, max_busy)
    _write(chosen, as_uuids, before)
    return [g.index for g in chosen]


# -- arguments ----------------------------------------------------------------------------------
def _shown(value: Any) -> str:
    """``value`` for a message, short: ``repr`` of a 5000-digit int fails, of a long string floods."""
    if isinstance(value, numbers.Integral) and not isinstance(value, bool) and int(value).bit_length() > 64:
        return f"an integer of about {int(int(value).bit_length() * math.log10(2)) + 1} digits"
    text = repr(value)
    return text if len(text) <= 60 else f"{text[:40]}... ({len(text)} characters)"


def _number(name: str, value: Any, lo: float, hi: float, *, above_lo: bool = False) -> float:
    """``value`` as a float in [lo, hi] (``above_lo``: lo excluded), or the error naming ``name``."""
    if isinstance(value, bool) or not isinstance(value, numbers.Real):
        raise TypeError(f"pick_gpus(): {name} must be a number{'' if above_lo else ' or None'}, got {_shown(value)}")
    try:
        number: float = int(value) if isinstance(value, numbers.Integral) else float(value)
    except OverflowError:  # a huge Fraction
        number = math.inf
    # Plain comparisons: NaN fails each, and an int is compared exactly (math.isfinite(10**400) overflows).
    if not ((lo < number if above_lo else lo <= number) and number <= hi):
        bound = f"more than {lo:g} and at most {hi:g}" if above_lo else f"between {lo:g} and {hi:g}"
        raise ValueError(f"pick_gpus(): {name} must be {bound}, got {_shown(value)}")
    return float(number)


def _checked(n: Any, min_free: Any, max_busy: Any, timeout_s: Any) -> tuple[int, float | None, float | None, float]:
    if isinstance(n, bool) or not isinstance(n, numbers.Integral):
        raise TypeError(f"pick_gpus(): n must be a whole number of GPUs, got {_shown(n)}")
    if not 1 <= n <= MAX_GPUS:
        raise ValueError(f"pick_gpus(): n must be between 1 and {MAX_GPUS}, got {_shown(n)}")
    return (int(n),
            None if min_free is None else _number("min_free_memory_gib", min_free, 0.0, MAX_MEMORY_GIB),
            None if max_busy is None else _number("max_busy_percent", max_busy, 0.0, 100.0),
            _number("timeout_s", timeout_s, 0.0, MAX_TIMEOUT_S, above_lo=True))


# -- CUDA already started? ----------------------------------------------------------------------
_TOO_LATE = ("the choice could not take effect: CUDA reads CUDA_VISIBLE_DEVICES once, when it starts. "
             "Restart the kernel (or process) and call pick_gpus() before anything uses the GPU.")


def _refuse_if_torch_started_cuda() -> None:
    # Only a torch that is already imported is asked: importing it here would cost seconds, and a
    # torch imported later has not started CUDA yet.
    torch = sys.modules.get("torch")
    started = getattr(getattr(torch, "cuda", None), "is_initialized", None)
    if callable(started) and started():
        raise PickGpusError(f"PyTorch has already initialised CUDA in this process, so {_TOO_LATE}")


def _refuse_if_this_process_uses_a_gpu(gpus: list[_Gpu]) -> None:
    # Any framework (JAX, TensorFlow, CuPy, ...) that started CUDA shows up in NVML's process list. In a
    # container, where NVML lists host pids, the backend names this process by the device files it
    # holds (backends/pid_match.py), so it is found there too, its memory known or not.
    mine = [g.index for g in gpus if os.getpid() in g.pids]
    if mine:
        where = ", ".join(map(str, mine))
        raise PickGpusError(f"this process (pid {os.getpid()}) already holds memory on GPU {where}: "
                            f"CUDA is initialised here, so {_TOO_LATE}")


# -- reading the GPUs ---------------------------------------------------------------------------
def _read_gpus() -> tuple[str, list[_Gpu], list[dict[str, Any]]]:
    """(backend name, the GPUs as both looks saw them, their spec cards); on a worker thread (it may
    hang in the driver), so it closes the backend itself, whenever it gets there."""
    backend = open_backend()
    try:
        if backend.status != OK:
            raise PickGpusError(f"no GPU to pick: {backend.reason}")
        return backend.name, _look_twice(backend), backend.device_info()
    finally:
        backend.close()


def _look_twice(backend: Backend) -> list[_Gpu]:
    first = take(backend, time.time())["devices"]
    time.sleep(LOOK_GAP_S)
    second = take(backend, time.time())["devices"]
    gpus = []
    for a, b in zip(first, second):
        gpu = _Gpu(index=b["index"], uuid=b.get("uuid") or a.get("uuid"), name=b.get("name") or a.get("name"))
        for look in (a, b):
            _fold(gpu, look)
        gpus.append(gpu)
    return gpus


def _fold(gpu: _Gpu, look: dict[str, Any]) -> None:
    """Add one look: the higher utilization, the lower free memory, and every process."""
    if look.get("status") == LOST:
        gpu.problem = f"lost ({look['unavailable'].get('utilization_gpu_percent', 'it stopped answering')})"
        return
    busy, free = look.get("utilization_gpu_percent"), look.get("memory_free_bytes")
    if busy is not None:
        gpu.busy_percent = busy if gpu.busy_percent is None else max(gpu.busy_percent, busy)
    else:
        gpu.unknown.setdefault("busy", look["unavailable"].get("utilization_gpu_percent", "not read"))
    if free is not None:
        gpu.free_bytes = free if gpu.free_bytes is None else min(gpu.free_bytes, free)
    else:
        gpu.unknown.setdefault("free memory", look["unavailable"].get("memory_free_bytes", "not read"))
    procs = look.get("processes") or []
    gpu.pids |= {p["pid"] for p in procs if p["pid"] is not None}
    others = [p for p in procs if p["pid"] != os.getpid()]
    held = sum(p.get("used_memory_bytes") or 0 for p in others)
    if held >= gpu.others_bytes:  # the look in which others held more
        gpu.others_bytes, gpu.others = held, len(others)
        gpu.others_unknown = sum(p.get("used_memory_bytes") is None for p in others)


def _mark_mig(gpus: list[_Gpu], info: list[dict[str, Any]]) -> None:
    # CUDA runs on a MIG instance, never on a whole GPU in MIG mode.
    for gpu, card in zip(gpus, info):
        if card.get("mig_mode") == "enabled" and gpu.problem is None:
            gpu.problem = "in MIG mode (pick_gpus chooses whole GPUs; name a MIG instance by its UUID instead)"


# -- CUDA_VISIBLE_DEVICES -----------------------------------------------------------------------
def _visible_setting() -> str | None:
    """The CUDA_VISIBLE_DEVICES to respect: the one before our own earlier call, if ours is in place."""
    value = os.environ.get(ENV_VISIBLE)
    if _written is not None and value == _written[0]:
        return _written[1]
    return value


def _restrict_to_visible(gpus: list[_Gpu], before: str | None) -> bool:
    """Mark the GPUs CUDA_VISIBLE_DEVICES hides; True when it names GPUs by UUID (we answer in kind)."""
    if before is None:
        return False
    shown = shown_setting(before)
    if "MIG-" in before.upper():
        raise PickGpusError(f"{ENV_VISIBLE}={shown} names a MIG instance: a process uses one MIG instance, "
                            "so there is nothing to pick; unset it to let pick_gpus() choose whole GPUs")
    visible = cuda_visible_indices(before, [g.uuid for g in gpus]) or []
    if not visible:
        raise PickGpusError(f"{ENV_VISIBLE}={shown} leaves this process no GPU (CUDA stops at the first "
                            f"entry it cannot resolve; it accepts {ACCEPTED}); "
                            f"GPUs here: {', '.join(str(g.index) for g in gpus)}")
    as_uuids = before.strip().upper().startswith("GPU-")
    order = os.environ.get(ENV_ORDER, "")
    if not as_uuids and order != PCI_ORDER and len({g.name for g in gpus}) > 1:
        raise PickGpusError(f"{ENV_VISIBLE}={shown} names GPUs by index while {ENV_ORDER} is "
                            f"{order or 'unset'} on a machine with different GPU models, so CUDA numbers them "
                            f"fastest first, not as NVML does: set {ENV_ORDER}={PCI_ORDER} or name them by UUID")
    for gpu in gpus:
        if gpu.index not in visible and gpu.problem is None:
            gpu.problem = f"hidden by {ENV_VISIBLE}={shown}"
    return as_uuids


def _write(chosen: list[_Gpu], as_uuids: bool, before: str | None) -> None:
    global _written
    value = ",".join(str(g.uuid) if as_uuids else str(g.index) for g in chosen)
    os.environ[ENV_ORDER] = PCI_ORDER
    os.environ[ENV_VISIBLE] = value
    _written = (value, before)


# -- choosing -----------------------------------------------------------------------------------
def _failures(gpu: _Gpu, min_free: float | None, max_busy: float | None) -> list[str]:
    if gpu.problem is not None:
        return [gpu.problem]
    failed = []
    if max_busy is not None:
        if gpu.busy_percent is None:
            failed.append(f"utilization unknown ({gpu.unknown.get('busy')}), max_busy_percent={max_busy:g}")
        elif gpu.busy_percent > max_busy:
            failed.append(f"busy {gpu.busy_percent:g} % > max_busy_percent={max_busy:g}")
    if min_free is not None:
        if gpu.free_bytes is None:
            failed.append(f"free memory unknown ({gpu.unknown.get('free memory')}), min_free_memory_gib={min_free:g}")
        elif gpu.free_bytes < min_free * GIB:
            failed.append(f"{gpu.free_bytes / GIB:.1f} GiB free < min_free_memory_gib={min_free:g}")
    return failed


def _rank(gpu: _Gpu) -> tuple[float, float, int]:
    # A figure that could not be read ranks after every known one.
    busy = math.inf if gpu.busy_percent is None else gpu.busy_percent
    free = math.inf if gpu.free_bytes is None else -gpu.free_bytes
    return busy, free, gpu.index


def _choose(gpus: list[_Gpu], n: int, min_free: float | None, max_busy: float | None) -> list[_Gpu]:
    failed = {g.index: why for g in gpus if (why := _failures(g, min_free, max_busy))}
    fit = sorted((g for g in gpus if g.index not in failed), key=_rank)
    if len(fit) >= n:
        return fit[:n]
    asked = [f"n={n}"] + [f"{k}={v:g}" for k, v in (("min_free_memory_gib", min_free),
                                                      ("max_busy_percent", max_busy)) if v is not None]
    lines = [f"pick_gpus({', '.join(asked)}): {len(fit)} of {len(gpus)} GPU{'s' if len(gpus) != 1 else ''} "
             f"qualif{'ies' if len(fit) == 1 else 'y'}, {n} wanted"]
    for g in gpus:
        verdict = f"fails: {'; '.join(failed[g.index])}" if g.index in failed else "qualifies"
        lines.append(f"  {g.describe()} -> {verdict}")
    raise PickGpusError("\n".join(lines))
