"""Simulated GPUs for demos and UI tests: deterministic, plausible, and never mistaken for real.

Every device is named "Simulated ...". Readings are a pure function of (seed, GPU, wall-clock time
on a fixed 0.5 s grid), so every process on a machine (the server behind the sidebar, each
kernel) shows the same simulated GPUs at the same moment, however often it reads them. A
240 s load profile drives utilization; temperature follows it with a 30 s lag; power and
memory-controller load follow it; memory steps up as a "model" loads and drops at the end of a
run. Energy counts from the machine's boot, as NVML's counter counts from the driver's load.

Scripted faults are the exception: their times stay seconds after this backend opened (tests
and the screenshot script rely on that), so they show only in the process that scripted them.
"""
from __future__ import annotations

import functools
import math
import os
import threading
import time
from dataclasses import dataclass
from typing import Any, Callable

import psutil

from ..metrics.fields import FAST_FIELDS, GPM_FIELDS, SLOW_FIELDS
from ..metrics.samples import FastRead, ProcessEntry, SlowRead
from ..metrics.throttle import BITS
from .base import GPM_OFF, OK, Backend, DeviceDict, lost_device
from .faults import Fault
from .simulated_use import ClaimReader, claimers, with_claims
from .simulated_gpm import SMALL_KERNELS_BUSY, gpm_values, process_use

GIB = 1 << 30
STEP_S = 0.5
CYCLE_S = 240.0  # one simulated "run": idle, load, train with eval dips, checkpoint
CYCLE_STEPS = int(CYCLE_S / STEP_S)
GPU_SHIFT_S = 97.0  # GPUs run out of phase: GPU 0 and 1 are never both between runs (50 s each)
TEMP_TAU_S = 30.0
ALPHA = 1 - math.exp(-STEP_S / TEMP_TAU_S)
THERMAL_RISE_C = 22.0
# A PID above Linux's largest pid_max (2**22) cannot collide with a real process.
PID_BASE = 4_200_000
COLLEAGUE_UID = 4_200_000  # far above the ids distributions hand out

# An H100 SXM: its fan is not reported by NVML (passively cooled), as on the real board.
SPEC: dict[str, Any] = {
    "name": "Simulated NVIDIA H100 80GB HBM3",
    "memory_total_bytes": 80 * GIB,
    "power_limit_w": 700.0,
    "power_default_limit_w": 700.0,
    "temperature_slowdown_c": 87,
    "max_sm_clock_mhz": 1980,
    "max_memory_clock_mhz": 2619,
    "cores": 16896,
    "memory_bus_width_bits": 5120,
    "pcie_max_generation": 5,
    "pcie_max_width": 16,
    "compute_capability": "9.0",
    "mig_mode": "disabled",
    "mig_device_uuids": [],
}
NATIVE_UNSUPPORTED = {"fan_percent": "not supported on this GPU (passively cooled)"}
POWER_CAP = BITS["sw_power_cap"]
THERMAL = BITS["sw_thermal_slowdown"] | BITS["hw_thermal_slowdown"]
IDLE = BITS["gpu_idle"]


@functools.lru_cache(maxsize=1)
def _current_user() -> str:
    """This process's user as a real process of it would show: the passwd name of the real uid, or
    the uid as text where it has none (never ``$USER``, which anyone can set)."""
    try:
        return psutil.Process().username()
    except psutil.Error:
        return str(os.getuid())


@functools.lru_cache(maxsize=1)
def _boot_step() -> int:
    """The grid step of this machine's boot: the same in every process, so energy counters agree."""
    return int(psutil.boot_time() / STEP_S)


def _colleague_uid() -> int:
    """A uid that is not ours, for the simulated other user's job."""
    return COLLEAGUE_UID if os.getuid() != COLLEAGUE_UID else COLLEAGUE_UID + 1


def _noise(seed: int, gpu: int, step: int, salt: int) -> float:
    """Deterministic value in [-1, 1) from a cheap integer hash."""
    x = (seed * 0x9E3779B1 ^ gpu * 0x85EBCA77 ^ step * 0xC2B2AE3D ^ salt * 0x27D4EB2F) & 0xFFFFFFFF
    x ^= x >> 15
    x = (x * 0x2C1B3C6D) & 0xFFFFFFFF
    x ^= x >> 12
    return (x / 2**31) - 1.0


def load_profile(s: float, gpu: int) -> tuple[float, str]:
    """Target utilization (0-100) and phase name ``s`` seconds into a GPU's cycle."""
    s %= CYCLE_S
    if s < 8:
        return 0.0, "idle"
    if s < 20:
        return 12.0, "loading"
    if s < 210:
        in_epoch = (s - 20) % 45
        return (35.0, "eval") if in_epoch > 40 else (93.0 - 4 * (gpu % 8), "train")
    if s < 225:
        return 6.0, "checkpoint"
    return 0.0, "idle"


def _power(util: float) -> float:
    return 72.0 + (SPEC["power_limit_w"] - 72.0) * 0.93 * util / 100.0


@dataclass(frozen=True)
class _Cycle:
    """One GPU's cycle, tabulated once per step of the grid: what every read looks up."""

    util: tuple[float, ...]
    phase: tuple[str, ...]
    temp: tuple[float, ...]  # the lagging temperature once the cycle repeats (its steady state)
    energy: tuple[float, ...]  # joules used from the cycle's start up to each step, over two cycles

    def energy_through(self, offset: int, k: int) -> float:
        """Joules of noiseless power over wall steps 0..k of a GPU whose cycle starts ``offset`` in."""
        n = k + 1
        full, rest = divmod(n, CYCLE_STEPS)
        return full * self.energy[CYCLE_STEPS] + self.energy[offset + rest] - self.energy[offset]


@functools.lru_cache(maxsize=8)
def _cycle(gpu: int) -> _Cycle:
    util, phase = zip(*(load_profile(i * STEP_S, gpu) for i in range(CYCLE_STEPS)))
    temp, t = [0.0] * CYCLE_STEPS, 34.0
    for _ in range(4):  # the lag forgets all but e**-32 of where it began after four cycles
        for i, u in enumerate(util):
            t += (34.0 + 0.42 * u - t) * ALPHA
            temp[i] = t
    energy = [0.0]
    for i in range(2 * CYCLE_STEPS):
        energy.append(energy[-1] + _power(util[i % CYCLE_STEPS]) * STEP_S)
    return _Cycle(util, phase, tuple(temp), tuple(energy))


def _lagged(fault: Fault, elapsed: float, rise: float) -> float:
    """How far a first-order lag has moved towards ``rise`` during a fault's window."""
    if elapsed < fault.start_s:
        return 0.0
    on = (elapsed if fault.end_s is None else min(elapsed, fault.end_s)) - fault.start_s
    off = 0.0 if fault.end_s is None else max(0.0, elapsed - fault.end_s)
    return rise * (1 - math.exp(-on / TEMP_TAU_S)) * math.exp(-off / TEMP_TAU_S)


class SimulatedBackend(Backend):
    name = "simulated"

    def __init__(
        self,
        n_gpus: int = 2,
        seed: int = 0,
        faults: tuple[Fault, ...] = (),
        t0: float | None = None,
        clock: Callable[[], float] = time.time,
    ) -> None:
        """``t0``: when the backend opened (faults count from it); else ``clock()`` at ``open()``."""
        super().__init__()
        if n_gpus < 1:
            raise ValueError(f"the simulated backend needs at least 1 GPU, got {n_gpus}")
        bad = [f for f in faults if f.gpu >= n_gpus]
        if bad:
            raise ValueError(f"fault for GPU {bad[0].gpu} but only {n_gpus} simulated GPUs (0-{n_gpus - 1})")
        self.n_gpus = n_gpus
        self.seed = seed
        self.faults = tuple(faults)
        self.t0 = t0
        self.clock = clock
        self.system = {"driver_version": "simulated", "nvml_version": "simulated", "cuda_driver_version": "13.0"}
        # Where each GPU's cycle starts on the grid; the seed moves all GPUs together.
        self._offsets = [round(((seed * 97) % CYCLE_S + gpu * GPU_SHIFT_S) / STEP_S) % CYCLE_STEPS for gpu in range(n_gpus)]
        self._cache: list[tuple[tuple[int, int], dict[str, Any]] | None] = [None] * n_gpus
        self._fault_energy: list[tuple[int, float] | None] = [None] * n_gpus  # (last step, joules)
        self._lock = threading.Lock()
        self._claims = ClaimReader()  # real processes holding simulated GPU memory (simulated_use.py)

    def open(self) -> None:
        if self.t0 is None:
            self.t0 = self.clock()
        self.status, self.reason = OK, None

    def _uuid(self, gpu: int) -> str:
        h = [(int((_noise(self.seed, gpu, i, 7) + 1) * 2**31)) & 0xFFFFFFFF for i in range(4)]
        hexed = "".join(f"{v:08x}" for v in h)
        return f"GPU-{hexed[:8]}-{hexed[8:12]}-{hexed[12:16]}-{hexed[16:20]}-{hexed[20:32]}"

    def device_info(self) -> list[DeviceDict]:
        out = []
        for gpu in range(self.n_gpus):
            # A made-up bus per GPU, stable across runs like the UUIDs: 0x18, 0x2A, 0x3C, ...
            bus = f"00000000:{(0x18 + 0x12 * gpu) & 0xFF:02X}:00.0"
            info = {"index": gpu, "uuid": self._uuid(gpu), **SPEC, "pci_bus_id": bus, "status": OK}
            info["memory_bandwidth_bytes_per_s"] = 2.0 * SPEC["max_memory_clock_mhz"] * 1e6 * SPEC["memory_bus_width_bits"] / 8
            info["unavailable"] = {}
            out.append(info)
        return out

    # -- faults (seconds since open) -----------------------------------------------------------
    def _active(self, gpu: int, kind: str, elapsed: float) -> list[Fault]:
        return [f for f in self.faults if f.gpu == gpu and f.kind == kind and f.active(elapsed)]

    def _unsupported(self, gpu: int, elapsed: float) -> dict[str, str]:
        out = dict(NATIVE_UNSUPPORTED)
        for f in self._active(gpu, "unsupported", elapsed):
            out[f.arg or ""] = "not supported on this GPU (simulated fault)"
        return out

    def _throttles(self, gpu: int, elapsed: float) -> int:
        bits = 0
        for f in self._active(gpu, "throttle", elapsed):
            bits |= f.throttle_bit
        return bits

    def _thermal_rise(self, gpu: int, elapsed: float) -> float:
        rise = sum(
            _lagged(f, elapsed, THERMAL_RISE_C)
            for f in self.faults
            if f.gpu == gpu and f.kind == "throttle" and f.throttle_bit & THERMAL
        )
        return min(rise, THERMAL_RISE_C)  # overlapping thermal faults heat no more than one

    def _extra_energy(self, gpu: int, k: int) -> float:
        """Joules that throttle faults added (or saved) up to wall step ``k``, stepped from the
        start so energy only grows as time does, however the reads fall."""
        if not any(f.gpu == gpu and f.kind == "throttle" for f in self.faults):
            return 0.0
        first = int((self.t0 or 0.0) / STEP_S)
        done, joules = self._fault_energy[gpu] or (first, 0.0)
        if k < done:  # read back in time: count again from the start
            done, joules = first, 0.0
        cyc, offset = _cycle(gpu % 8), self._offsets[gpu]
        while done < k:
            done += 1
            bits = self._throttles(gpu, done * STEP_S - (self.t0 or 0.0))
            util = cyc.util[(done + offset) % CYCLE_STEPS]
            if bits & POWER_CAP:
                joules += (SPEC["power_limit_w"] * 0.995 - _power(util)) * STEP_S
            elif bits and util > 5:
                joules += (_power(min(util, 78.0)) - _power(util)) * STEP_S
        self._fault_energy[gpu] = (done, joules)
        return joules

    # -- dynamics ------------------------------------------------------------------------------
    def _values(self, gpu: int, k: int, elapsed: float) -> dict[str, Any]:
        """Readings at wall step ``k``; ``elapsed`` (seconds since open, on the grid) places faults."""
        cyc, pos = _cycle(gpu % 8), (k + self._offsets[gpu]) % CYCLE_STEPS
        target, phase = cyc.util[pos], cyc.phase[pos]
        throttles = self._throttles(gpu, elapsed)
        small = bool(self._active(gpu, "small_kernels", elapsed))
        util = (SMALL_KERNELS_BUSY if small else target) + (3.0 * _noise(self.seed, gpu, k, 1) if target or small else 0.0)
        util = min(100.0, max(0.0, util))
        if util > 5 and throttles & ~POWER_CAP:
            util = min(util, 78.0)  # throttled clocks stretch kernels: less work done per second
        limit = SPEC["power_limit_w"]
        power = _power(util) + 6.0 * _noise(self.seed, gpu, k, 2)
        if throttles & POWER_CAP:
            power = limit * 0.995
        temperature = cyc.temp[pos] + self._thermal_rise(gpu, elapsed)
        base = cyc.energy_through(self._offsets[gpu], k)
        since = cyc.energy_through(self._offsets[gpu], _boot_step()) if k >= _boot_step() else 0.0
        energy = base - since + self._extra_energy(gpu, k)
        s = pos * STEP_S
        # Runs of 26.6-44.6 GiB: at most 56 % of 80 GiB, so a demo raises no memory alert (95 %) unless
        # a fault is scripted, and GPUs 0 and 1 keep 40 GiB free for the README's pick_gpus() example.
        model = (12 + 6 * (gpu % 4)) * GIB
        if phase == "loading":
            used = 0.6 * GIB + model * min(1.0, (s - 8) / 10)  # weights arrive in steps
            used = 0.6 * GIB + math.floor((used - 0.6 * GIB) / (4 * GIB)) * 4 * GIB
        elif phase in ("train", "eval", "checkpoint"):
            used = 0.6 * GIB + model + 14 * GIB  # weights + optimizer state + activations
        else:
            used = 0.6 * GIB
        busy = util > 5
        sm_clock = SPEC["max_sm_clock_mhz"] if busy else 345
        if busy and throttles:
            sm_clock = 1410 if throttles & ~POWER_CAP else 1755
        reasons = throttles if busy else IDLE | throttles
        return {
            "utilization_gpu_percent": round(util),
            "utilization_memory_percent": round(util * 0.45),
            "memory_used_bytes": int(used),
            "memory_free_bytes": SPEC["memory_total_bytes"] - int(used),
            "memory_total_bytes": SPEC["memory_total_bytes"],
            "temperature_c": round(temperature),
            "fan_percent": None,
            "power_w": round(power, 1),
            "power_limit_w": limit,
            "energy_j": round(energy, 1),
            "sm_clock_mhz": sm_clock,
            "memory_clock_mhz": SPEC["max_memory_clock_mhz"] if busy else 1593,
            "graphics_clock_mhz": sm_clock,
            "performance_state": 0 if busy else 5,
            "throttle_reasons": reasons,
            "pcie_tx_bytes_per_s": int((2.5e9 if phase == "loading" else 0.3e9 if busy else 1e5) * (1.1 + 0.1 * _noise(self.seed, gpu, k, 3))),
            "temperature_slowdown_c": SPEC["temperature_slowdown_c"],
            "pcie_rx_bytes_per_s": int((12e9 if phase == "loading" else 1.5e9 if busy else 2e5) * (1.1 + 0.1 * _noise(self.seed, gpu, k, 4))),
            "_busy": phase != "idle" or small,
            "mig_instances": [],
            **gpm_values(util, phase, small, lambda salt: _noise(self.seed, gpu, k, salt)),
        }

    def _cached_values(self, gpu: int, t: float, elapsed: float) -> dict[str, Any]:
        """Values change once per grid step; readers at 10 Hz mostly hit this cache."""
        k, n = int(t // STEP_S), int(elapsed // STEP_S)
        hit = self._cache[gpu]
        if hit is not None and hit[0] == (k, n):
            return hit[1]
        values = self._values(gpu, k, n * STEP_S)
        self._cache[gpu] = ((k, n), values)
        return values

    # -- reads ---------------------------------------------------------------------------------
    def _elapsed(self, t: float) -> float:
        return t - (self.t0 if self.t0 is not None else t)

    def _read(self, t: float, names: tuple[str, ...], identity: bool) -> list[Any]:
        elapsed = self._elapsed(t)
        out: list[Any] = []
        claims = self._claims.get()
        with self._lock:
            for gpu in range(self.n_gpus):
                uuid, name = self._uuid(gpu), SPEC["name"]
                if self._active(gpu, "lost", elapsed):
                    if identity:
                        out.append(lost_device(gpu, uuid, name, "GPU is lost (simulated fault)"))
                    continue
                values = self._cached_values(gpu, t, elapsed)
                claimed = claims.get(gpu, [])
                values = with_claims(values, claimed)
                sample: dict[str, Any] = {"index": gpu}
                if identity:
                    sample.update(uuid=uuid, name=name, status=OK)
                unsupported = self._unsupported(gpu, elapsed)
                unavailable = {}
                for n in names:
                    if n == "processes":
                        sample[n] = self._processes(gpu, values) + claimers(self._claims, claimed, values, self.gpm)
                    elif n in GPM_FIELDS and not self.gpm:
                        sample[n] = None
                        unavailable[n] = GPM_OFF
                    else:
                        sample[n] = values[n]
                    if n in unsupported:
                        sample[n] = None
                        unavailable[n] = unsupported[n]
                sample["unavailable"] = unavailable
                out.append(sample)
        return out

    def _processes(self, gpu: int, values: dict[str, Any]) -> list[ProcessEntry]:
        """A training process of the current user on each busy GPU; odd GPUs also host a small job
        of another user, so the privacy rules have something to hide in demos."""
        if not values["_busy"]:
            return []
        used = max(0, values["memory_used_bytes"] - int(0.6 * GIB))
        procs: list[ProcessEntry] = [
            {
                "pid": PID_BASE + 2 * gpu,
                "used_memory_bytes": max(0, used - (2 * GIB if gpu % 2 else 0)),  # never negative while loading
                "name": "python",
                "uid": os.getuid(),
                "user": _current_user(),
                "command": f"python train.py --device cuda:{gpu}  (simulated process)",
                "matched_by": "pid",
                "nvml_pid": PID_BASE + 2 * gpu,
                **process_use(values, 0.95 if gpu % 2 else 1.0, self.gpm, GPM_OFF),  # type: ignore[typeddict-item]
            }
        ]
        if gpu % 2:
            procs.append(
                {
                    "pid": PID_BASE + 2 * gpu + 1,
                    "used_memory_bytes": 2 * GIB,
                    "name": "python",
                    "uid": _colleague_uid(),
                    "user": "simulated-colleague",
                    "command": "python eval.py  (simulated process of another user)",
                    "matched_by": "pid",
                    "nvml_pid": PID_BASE + 2 * gpu + 1,
                    **process_use(values, 0.05, self.gpm, GPM_OFF),  # type: ignore[typeddict-item]
                }
            )
        return procs

    def read_fast(self, t: float) -> list[FastRead]:
        return self._read(t, FAST_FIELDS, identity=True)

    def read_slow(self, t: float) -> list[SlowRead]:
        return self._read(t, SLOW_FIELDS, identity=False)
