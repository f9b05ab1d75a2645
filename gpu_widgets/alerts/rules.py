"""The five alert rules, applied to one snapshot: which conditions hold on which GPU right now.

A rule reports a condition as ``ACTIVE`` (over the line: an episode opens, or goes on) or
``HOLDING`` (back under the line but not yet past the way back: an open episode goes on, none
opens). A condition not reported is clear. The two lines make a reading that hovers at the
threshold one episode, not a flood (episodes.py also waits a few seconds before it ends one).

Rules read the snapshot and the kernel attribution they are given; they never call NVML or
walk /proc, so one evaluation per tick costs microseconds per GPU.
"""
from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from ..metrics.throttle import LABELS, SLOWDOWN_MASK, slowdown_names
from .words import duration

ACTIVE, HOLDING = "active", "holding"
KINDS = ("lost", "temperature", "throttle", "memory", "idle_kernel")
# The levels of JupyterLab's notifications, so the sidebar can pass them on as they are.
SEVERITY = {"lost": "error", "temperature": "warning", "throttle": "warning", "memory": "warning",
            "idle_kernel": "info"}

# When NVML does not tell a GPU's slowdown temperature: below every data-centre GPU's limit
# we know of (85-95 °C), so the rule still warns before the clocks drop.
FALLBACK_SLOWDOWN_C = 90.0
TEMPERATURE_BACK_C = 3.0  # an episode ends this far under its line
MEMORY_BACK_PERCENT = 2.0
IDLE_PERCENT = 5.0  # "idle": busy under this
IDLE_BACK_PERCENT = 10.0  # an idle-kernel episode ends when the GPU is busier than this
GIB = 1 << 30


@dataclass(frozen=True)
class Thresholds:
    temperature_margin_c: float = 5.0
    throttle_s: float = 30.0
    memory_percent: float = 95.0
    idle_kernel_memory_gib: float = 1.0
    idle_minutes: float = 10.0
    gpus: str = "all"  # or "mine": only GPUs that this server's kernels use


@dataclass(frozen=True)
class KernelRef:
    """One of this server's kernels, as the attribution found it for a GPU process."""

    kernel_id: str
    notebook_path: str | None


@dataclass(frozen=True)
class Condition:
    key: tuple[Any, ...]  # the same key for every tick of one episode
    kind: str
    level: str
    gpu: int
    uuid: str | None
    since: float  # when it began: the episode's start, if it opens now
    what: str  # what and where, in plain words (episodes.py adds when)
    kernel: Mapping[str, Any] | None = None  # kernel_id, notebook_path, pid, memory_bytes


@dataclass
class GpuState:
    """What a rule needs to remember of one GPU between ticks."""

    uuid: str | None
    throttled_since: float | None = None
    idle_since: float | None = None
    kernels: frozenset[str] = field(default_factory=frozenset)  # this server's kernels seen on it


def evaluate(snapshot: Mapping[str, Any], limits: Thresholds, states: dict[int, GpuState],
             owners: Mapping[int, KernelRef], gpus: Iterable[int] | None = None) -> list[Condition]:
    """Every condition that holds in ``snapshot``, on the GPUs in ``gpus`` (all when None).

    ``states`` is updated in place; ``owners`` maps a GPU process's pid to its kernel.
    """
    now = float(snapshot["timestamp"])
    chosen = None if gpus is None else set(gpus)
    found: list[Condition] = []
    for dev in snapshot["devices"]:
        index = dev["index"]
        state = states.get(index)
        if state is None or state.uuid != dev.get("uuid") and dev.get("uuid") is not None:
            state = states[index] = GpuState(dev.get("uuid"))
        _remember(state, dev, owners, now)
        if chosen is not None and index not in chosen:
            continue
        where = _where(dev)
        if dev.get("status") == "lost":
            found.append(_condition(dev, "lost", ACTIVE, now, f"{where} lost: it stopped answering the driver"))
            continue
        for rule in (_temperature, _throttle, _memory):
            hit = rule(dev, state, limits, now, where)
            if hit is not None:
                found.append(hit)
        found.extend(_idle_kernels(dev, state, limits, owners, now, where))
    return found


def _remember(state: GpuState, dev: Mapping[str, Any], owners: Mapping[int, KernelRef], now: float) -> None:
    """Streaks (throttled, idle) and which kernels use the GPU; a lost GPU keeps its kernels."""
    if dev.get("status") == "lost":
        state.throttled_since = state.idle_since = None
        return
    mask = dev.get("throttle_reasons")
    if mask and mask & SLOWDOWN_MASK:
        state.throttled_since = state.throttled_since if state.throttled_since is not None else now
    else:
        state.throttled_since = None
    busy = dev.get("utilization_gpu_percent")
    if busy is not None and busy < IDLE_PERCENT:
        state.idle_since = state.idle_since if state.idle_since is not None else now
    else:
        state.idle_since = None  # busy, or unknown: an idle GPU is one we saw idle
    procs = dev.get("processes")
    if procs is not None:
        # No owners (no kernel runs a GPU process): skip the walk, 64 000 processes every tick.
        state.kernels = frozenset(owners[p["pid"]].kernel_id for p in procs if p["pid"] in owners) if owners else frozenset()


def _where(dev: Mapping[str, Any]) -> str:
    name = dev.get("name")
    return f"GPU {dev['index']} ({name})" if name else f"GPU {dev['index']}"


def _condition(dev: Mapping[str, Any], kind: str, level: str, since: float, what: str,
               key: tuple[Any, ...] = (), kernel: Mapping[str, Any] | None = None) -> Condition:
    return Condition((kind, dev["index"], *key), kind, level, dev["index"], dev.get("uuid"), since, what, kernel)


def _temperature(dev: Mapping[str, Any], state: GpuState, limits: Thresholds, now: float, where: str) -> Condition | None:
    temp = dev.get("temperature_c")
    if temp is None:
        return None
    known = dev.get("temperature_slowdown_c")
    limit = float(known) if known else FALLBACK_SLOWDOWN_C
    line = limit - limits.temperature_margin_c
    if temp >= line:
        level = ACTIVE
    elif temp >= line - TEMPERATURE_BACK_C:
        level = HOLDING
    else:
        return None
    told = "its slowdown temperature" if known else "a typical slowdown temperature (this GPU does not tell its own)"
    what = f"{where} hot: {temp:g} °C, within {limits.temperature_margin_c:g} °C of {told} ({limit:g} °C)"
    return _condition(dev, "temperature", level, now, what)


def _throttle(dev: Mapping[str, Any], state: GpuState, limits: Thresholds, now: float, where: str) -> Condition | None:
    since = state.throttled_since
    if since is None:
        return None
    # Under the time line it only keeps an open episode going (a one-tick gap restarts the streak).
    level = ACTIVE if now - since >= limits.throttle_s else HOLDING
    reasons = ", ".join(LABELS.get(n, n) for n in slowdown_names(dev.get("throttle_reasons")))
    what = f"{where} slowed down by {reasons} for more than {limits.throttle_s:g} s"
    return _condition(dev, "throttle", level, since, what)


def _memory(dev: Mapping[str, Any], state: GpuState, limits: Thresholds, now: float, where: str) -> Condition | None:
    used, total = dev.get("memory_used_bytes"), dev.get("memory_total_bytes")
    if used is None or not total:
        return None
    percent = 100.0 * used / total
    if percent >= limits.memory_percent:
        level = ACTIVE
    elif percent >= limits.memory_percent - MEMORY_BACK_PERCENT:
        level = HOLDING
    else:
        return None
    what = f"{where} memory nearly full: {used / GIB:.1f} of {total / GIB:.1f} GiB used ({percent:.0f} %)"
    return _condition(dev, "memory", level, now, what)


def _idle_kernels(dev: Mapping[str, Any], state: GpuState, limits: Thresholds, owners: Mapping[int, KernelRef],
                  now: float, where: str) -> list[Condition]:
    busy = dev.get("utilization_gpu_percent")
    procs = dev.get("processes")
    if busy is None or busy >= IDLE_BACK_PERCENT or not procs or not owners:
        return []
    idle_long = state.idle_since is not None and now - state.idle_since >= limits.idle_minutes * 60
    held: dict[str, tuple[int, int, int]] = {}  # kernel -> (bytes in all, pid of the biggest, its bytes)
    for proc in procs:
        owner, size = owners.get(proc["pid"]), proc.get("used_memory_bytes")
        if owner is None or size is None:
            continue
        total, pid, biggest = held.get(owner.kernel_id, (0, proc["pid"], -1))
        if size > biggest:
            pid, biggest = proc["pid"], size
        held[owner.kernel_id] = (total + size, pid, biggest)
    out = []
    for kernel_id, (total, pid, _) in held.items():
        if total < limits.idle_kernel_memory_gib * GIB:
            continue
        ref = owners[pid]
        name = f"notebook {ref.notebook_path}" if ref.notebook_path else f"kernel {kernel_id[:8]}"
        since = state.idle_since
        idle = f"idle for {duration(now - since)}" if since is not None else "nearly idle"
        what = f"The kernel of {name} holds {total / GIB:.1f} GiB on {where}, {idle}"
        kernel = {"kernel_id": kernel_id, "notebook_path": ref.notebook_path, "pid": pid, "memory_bytes": total}
        out.append(_condition(dev, "idle_kernel", ACTIVE if idle_long else HOLDING, now, what, (kernel_id,), kernel))
    return out
