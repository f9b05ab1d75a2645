"""Simulated GPUs for demos and UI tests: deterministic, plausible, and never mistaken for real.

Every device is named "Simulated ...". Values are a pure function of (seed, GPU, time since
start): a load profile drives utilization; temperature follows it with a 30 s lag; power and
memory-controller load follow it; memory steps up as a "model" loads and drops at the end of a
run. State advances on a fixed 0.5 s grid so the same times give the same values however often
they are read.
"""
from __future__ import annotations

import functools
import math
import os
import threading
import time
from dataclasses import dataclass, field
from typing import Any

import psutil

from ..metrics.fields import FAST_FIELDS, SLOW_FIELDS
from ..metrics.samples import FastRead, ProcessEntry, SlowRead
from ..metrics.throttle import BITS
from .base import OK, Backend, DeviceDict, lost_device
from .faults import Fault

GIB = 1 << 30
STEP_S = 0.5
CYCLE_S = 240.0  # one simulated "run": idle, load, train with eval dips, checkpoint
# The dynamics start this far into the profile, so a fresh demo already shows warm, busy GPUs.
# Fault times stay relative to the real start.
PREROLL_S = 60.0
TEMP_TAU_S = 30.0
# A PID above Linux's largest pid_max (2**22) cannot collide with a real process.
PID_BASE = 4_200_000
COLLEAGUE_UID = 4_200_000  # far above the ids distributions hand out

# An H100 SXM: its fan is not reported by NVML (passively cooled), as on the real board.
SPEC: dict[str, Any] = {
    "name": "Simulated NVIDIA H100 80GB HBM3",
    "memory_total_bytes": 80 * GIB,
    "power_limit_w": 700.0,
    "power_default_limit_w": 700.0,
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


def load_profile(elapsed_s: float, gpu: int) -> tuple[float, str]:
    """Target utilization (0-100) and phase name at a time; GPUs are shifted so they differ."""
    s = (elapsed_s + gpu * 37.0) % CYCLE_S
    if s < 8:
        return 0.0, "idle"
    if s < 20:
        return 12.0, "loading"
    if s < 210:
        in_epoch = (s - 20) % 45
        return (35.0, "eval") if in_epoch > 40 else (93.0 - 4 * gpu, "train")
    if s < 225:
        return 6.0, "checkpoint"
    return 0.0, "idle"


@dataclass
class _SimState:
    step: int = -1
    temperature: float = 34.0
    energy_j: float = 0.0
    values: dict[str, Any] = field(default_factory=dict)


class SimulatedBackend(Backend):
    name = "simulated"

    def __init__(self, n_gpus: int = 2, seed: int = 0, faults: tuple[Fault, ...] = (), t0: float | None = None) -> None:
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
        self.system = {"driver_version": "simulated", "nvml_version": "simulated", "cuda_driver_version": "13.0"}
        self._states = [_SimState() for _ in range(n_gpus)]
        self._lock = threading.Lock()

    def open(self) -> None:
        if self.t0 is None:
            self.t0 = time.time()
        self.status, self.reason = OK, None

    def _uuid(self, gpu: int) -> str:
        h = [(int((_noise(self.seed, gpu, i, 7) + 1) * 2**31)) & 0xFFFFFFFF for i in range(4)]
        hexed = "".join(f"{v:08x}" for v in h)
        return f"GPU-{hexed[:8]}-{hexed[8:12]}-{hexed[12:16]}-{hexed[16:20]}-{hexed[20:32]}"

    def device_info(self) -> list[DeviceDict]:
        out = []
        for gpu in range(self.n_gpus):
            info = {"index": gpu, "uuid": self._uuid(gpu), **SPEC, "status": OK}
            info["memory_bandwidth_bytes_per_s"] = 2.0 * SPEC["max_memory_clock_mhz"] * 1e6 * SPEC["memory_bus_width_bits"] / 8
            info["unavailable"] = {}
            out.append(info)
        return out

    # -- faults --------------------------------------------------------------------------------
    def _active(self, gpu: int, kind: str, elapsed: float) -> list[Fault]:
        return [f for f in self.faults if f.gpu == gpu and f.kind == kind and f.active(elapsed)]

    def _unsupported(self, gpu: int, elapsed: float) -> dict[str, str]:
        out = dict(NATIVE_UNSUPPORTED)
        for f in self._active(gpu, "unsupported", elapsed):
            out[f.arg or ""] = "not supported on this GPU (simulated fault)"
        return out

    # -- dynamics ------------------------------------------------------------------------------
    def _advance(self, gpu: int, elapsed: float) -> dict[str, Any]:
        """Values at ``elapsed`` seconds, stepping the lagging state on the fixed grid."""
        target_step = max(0, int(elapsed / STEP_S))
        st = self._states[gpu]
        if target_step < st.step:  # time went backwards (a new t0): start again
            self._states[gpu] = st = _SimState()
        while st.step < target_step:
            st.step += 1
            st.values = self._step(gpu, st)
        return st.values

    def _step(self, gpu: int, st: _SimState) -> dict[str, Any]:
        t = st.step * STEP_S
        target, phase = load_profile(t, gpu)
        throttles = 0
        for f in self._active(gpu, "throttle", t - PREROLL_S):
            throttles |= f.throttle_bit
        util = target + (3.0 * _noise(self.seed, gpu, st.step, 1) if target > 0 else 0.0)
        util = min(100.0, max(0.0, util))
        if util > 5 and throttles & ~POWER_CAP:
            util = min(util, 78.0)  # throttled clocks stretch kernels: less work done per second
        limit = SPEC["power_limit_w"]
        power = 72.0 + (limit - 72.0) * 0.93 * util / 100.0 + 6.0 * _noise(self.seed, gpu, st.step, 2)
        if throttles & POWER_CAP:
            power = limit * 0.995
        temp_target = 34.0 + 0.42 * util + (22.0 if throttles & THERMAL else 0.0)
        st.temperature += (temp_target - st.temperature) * (1 - math.exp(-STEP_S / TEMP_TAU_S))
        st.energy_j += max(power, 0.0) * STEP_S
        s = (t + gpu * 37.0) % CYCLE_S
        model = (24 + 8 * gpu) * GIB
        if phase == "loading":
            used = 0.6 * GIB + model * min(1.0, (s - 8) / 10)  # weights arrive in steps
            used = 0.6 * GIB + math.floor((used - 0.6 * GIB) / (4 * GIB)) * 4 * GIB
        elif phase in ("train", "eval", "checkpoint"):
            used = 0.6 * GIB + model + 30 * GIB  # weights + optimizer state + activations
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
            "temperature_c": round(st.temperature),
            "fan_percent": None,
            "power_w": round(power, 1),
            "power_limit_w": limit,
            "energy_j": round(st.energy_j, 1),
            "sm_clock_mhz": sm_clock,
            "memory_clock_mhz": SPEC["max_memory_clock_mhz"] if busy else 1593,
            "graphics_clock_mhz": sm_clock,
            "performance_state": 0 if busy else 5,
            "throttle_reasons": reasons,
            "pcie_tx_bytes_per_s": int((2.5e9 if phase == "loading" else 0.3e9 if busy else 1e5) * (1.1 + 0.1 * _noise(self.seed, gpu, st.step, 3))),
            "pcie_rx_bytes_per_s": int((12e9 if phase == "loading" else 1.5e9 if busy else 2e5) * (1.1 + 0.1 * _noise(self.seed, gpu, st.step, 4))),
            "_busy": phase != "idle",
        }

    # -- reads ---------------------------------------------------------------------------------
    def _elapsed(self, t: float) -> float:
        return t - (self.t0 if self.t0 is not None else t)

    def _read(self, t: float, names: tuple[str, ...], identity: bool) -> list[Any]:
        elapsed = self._elapsed(t)
        out: list[Any] = []
        with self._lock:
            for gpu in range(self.n_gpus):
                uuid, name = self._uuid(gpu), SPEC["name"]
                if self._active(gpu, "lost", elapsed):
                    if identity:
                        out.append(lost_device(gpu, uuid, name, "GPU is lost (simulated fault)"))
                    continue
                values = self._advance(gpu, elapsed + PREROLL_S)
                sample: dict[str, Any] = {"index": gpu}
                if identity:
                    sample.update(uuid=uuid, name=name, status=OK)
                unsupported = self._unsupported(gpu, elapsed)
                unavailable = {}
                for n in names:
                    if n == "processes":
                        sample[n] = self._processes(gpu, values)
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
                "used_memory_bytes": used - (2 * GIB if gpu % 2 else 0),
                "name": "python",
                "uid": os.getuid(),
                "user": _current_user(),
                "command": f"python train.py --device cuda:{gpu}  (simulated process)",
                "unavailable": {},
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
                    "unavailable": {},
                }
            )
        return procs

    def read_fast(self, t: float) -> list[FastRead]:
        return self._read(t, FAST_FIELDS, identity=True)

    def read_slow(self, t: float) -> list[SlowRead]:
        return self._read(t, SLOW_FIELDS, identity=False)
