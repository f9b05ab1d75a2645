"""pynvml faked at its functions: a stand-in module whose calls answer from a dict.

Errors are real ``pynvml.NVMLError`` instances, so the code under test sees exactly what the
bindings raise. Used for fast unit tests; tests/fake_nvml (a fake libnvidia-ml.so.1) covers the
same paths through the real bindings.
"""
from __future__ import annotations

import threading
from types import SimpleNamespace
from typing import Any

import pynvml

GIB = 1 << 30


def h100(**overrides: Any) -> dict[str, Any]:
    gpu = {
        "name": "NVIDIA H100 80GB HBM3",
        "memory_total": 80 * GIB,
        "memory_used": 10 * GIB,
        "memory_free": 70 * GIB,
        "util_gpu": 97,
        "util_memory": 40,
        "temperature": 70,
        "temperature_slowdown": 87,
        "fan": 33,
        "power_mw": 300_000,
        "power_limit_mw": 700_000,
        "power_default_limit_mw": 700_000,
        "energy_mj": 123_456_789,
        "clocks": {0: 1980, 1: 1980, 2: 2619},
        "max_clocks": {0: 1980, 1: 1980, 2: 2619},
        "pstate": 0,
        "reasons": 0x4,
        "pcie_kbps": {0: 1000, 1: 2000},
        "cores": 16896,
        "bus_width": 5120,
        "pcie_gen": 5,
        "pcie_width": 16,
        "cc": (9, 0),
        "mig": (0, 0),
        "mig_devices": [],  # UUIDs of its MIG instances, in slot order; None: an empty slot
        "procs": [],
        "graphics_procs": [],
        "errors": {},  # function name -> NVML error code
    }
    gpu.update(overrides)
    return gpu


class FakeNvml:
    """The subset of pynvml that gpu_widgets calls, plus call counting."""

    nvmlMemory_v2 = pynvml.nvmlMemory_v2

    def __init__(self, gpus: list[dict[str, Any]], init_error: int | None = None, missing: tuple[str, ...] = ()) -> None:
        self.gpus = gpus
        self.init_error = init_error
        self.system_errors: dict[str, int] = {}
        self.missing = set(missing)
        self.calls: dict[str, int] = {}
        self._lock = threading.Lock()
        self.inited = 0

    # The seam NvmlBackend uses (stands in for gpu_widgets.backends.nvml.library.Nvml).
    def ensure(self) -> "FakeNvml":
        from gpu_widgets.backends.nvml.library import NoGpu
        from gpu_widgets.backends.nvml.errors import classify

        if self.init_error is not None:
            raise NoGpu(classify(pynvml.NVMLError(self.init_error)).reason)
        self.inited += 1
        return self

    def __getattribute__(self, name: str) -> Any:
        if name.startswith("nvml") and name in object.__getattribute__(self, "missing"):
            raise AttributeError(name)  # an older pynvml without this function
        return object.__getattribute__(self, name)

    def _count(self, fn: str) -> None:
        with self._lock:
            self.calls[fn] = self.calls.get(fn, 0) + 1

    def _gpu(self, fn: str, handle: Any) -> dict[str, Any]:
        self._count(fn)
        gpu = self.gpus[handle.index]
        code = gpu["errors"].get(fn, gpu["errors"].get("*"))
        if code:
            raise pynvml.NVMLError(code)
        return gpu

    def _sys(self, fn: str) -> None:
        self._count(fn)
        code = self.system_errors.get(fn)
        if code:
            raise pynvml.NVMLError(code)

    # -- system -------------------------------------------------------------------------------
    def nvmlDeviceGetCount(self) -> int:
        self._sys("nvmlDeviceGetCount")
        return len(self.gpus)

    def nvmlSystemGetDriverVersion(self) -> str:
        self._sys("nvmlSystemGetDriverVersion")
        return "580.65.06"

    def nvmlSystemGetNVMLVersion(self) -> str:
        self._sys("nvmlSystemGetNVMLVersion")
        return "13.580.65.06"

    def nvmlSystemGetCudaDriverVersion_v2(self) -> int:
        self._sys("nvmlSystemGetCudaDriverVersion_v2")
        return 13000

    def nvmlSystemGetCudaDriverVersion(self) -> int:
        self._sys("nvmlSystemGetCudaDriverVersion")
        return 12040

    def nvmlDeviceGetHandleByIndex(self, index: int) -> Any:
        handle = SimpleNamespace(index=index)
        self._gpu("nvmlDeviceGetHandleByIndex", handle)
        return handle

    # -- identity and static ------------------------------------------------------------------
    def nvmlDeviceGetUUID(self, h: Any) -> str:
        gpu = self._gpu("nvmlDeviceGetUUID", h)
        if getattr(h, "slot", None) is not None:
            return gpu["mig_devices"][h.slot]
        return gpu.get("uuid", f"GPU-0000000{h.index}-aaaa-bbbb-cccc-dddddddddddd")

    def nvmlDeviceGetName(self, h: Any) -> str:
        return self._gpu("nvmlDeviceGetName", h)["name"]

    def nvmlDeviceGetEnforcedPowerLimit(self, h: Any) -> int:
        return self._gpu("nvmlDeviceGetEnforcedPowerLimit", h)["power_limit_mw"]

    def nvmlDeviceGetPowerManagementDefaultLimit(self, h: Any) -> int:
        return self._gpu("nvmlDeviceGetPowerManagementDefaultLimit", h)["power_default_limit_mw"]

    def nvmlDeviceGetMaxClockInfo(self, h: Any, kind: int) -> int:
        return self._gpu("nvmlDeviceGetMaxClockInfo", h)["max_clocks"][kind]

    def nvmlDeviceGetNumGpuCores(self, h: Any) -> int:
        return self._gpu("nvmlDeviceGetNumGpuCores", h)["cores"]

    def nvmlDeviceGetMemoryBusWidth(self, h: Any) -> int:
        return self._gpu("nvmlDeviceGetMemoryBusWidth", h)["bus_width"]

    def nvmlDeviceGetMaxPcieLinkGeneration(self, h: Any) -> int:
        return self._gpu("nvmlDeviceGetMaxPcieLinkGeneration", h)["pcie_gen"]

    def nvmlDeviceGetMaxPcieLinkWidth(self, h: Any) -> int:
        return self._gpu("nvmlDeviceGetMaxPcieLinkWidth", h)["pcie_width"]

    def nvmlDeviceGetCudaComputeCapability(self, h: Any) -> tuple[int, int]:
        return self._gpu("nvmlDeviceGetCudaComputeCapability", h)["cc"]

    def nvmlDeviceGetMigMode(self, h: Any) -> tuple[int, int]:
        return self._gpu("nvmlDeviceGetMigMode", h)["mig"]

    def nvmlDeviceGetMaxMigDeviceCount(self, h: Any) -> int:
        return 7 if self._gpu("nvmlDeviceGetMaxMigDeviceCount", h)["mig"][0] else 0

    def nvmlDeviceGetMigDeviceHandleByIndex(self, h: Any, slot: int) -> Any:
        devices = self._gpu("nvmlDeviceGetMigDeviceHandleByIndex", h)["mig_devices"]
        if slot >= len(devices) or devices[slot] is None:
            raise pynvml.NVMLError(pynvml.NVML_ERROR_NOT_FOUND)
        return SimpleNamespace(index=h.index, slot=slot)

    # -- fast ---------------------------------------------------------------------------------
    def nvmlDeviceGetUtilizationRates(self, h: Any) -> Any:
        g = self._gpu("nvmlDeviceGetUtilizationRates", h)
        return SimpleNamespace(gpu=g["util_gpu"], memory=g["util_memory"])

    def nvmlDeviceGetMemoryInfo(self, h: Any, version: Any = None) -> Any:
        g = self._gpu("nvmlDeviceGetMemoryInfo_v2" if version else "nvmlDeviceGetMemoryInfo", h)
        if version:
            return SimpleNamespace(total=g["memory_total"], used=g["memory_used"], free=g["memory_free"])
        # v1 counts the driver's reservation as used
        return SimpleNamespace(total=g["memory_total"], used=g["memory_used"] + GIB // 2, free=g["memory_free"])

    def nvmlDeviceGetTemperature(self, h: Any, sensor: int) -> int:
        assert sensor == 0
        return self._gpu("nvmlDeviceGetTemperature", h)["temperature"]

    def nvmlDeviceGetTemperatureThreshold(self, h: Any, threshold: int) -> int:
        assert threshold == 1  # NVML_TEMPERATURE_THRESHOLD_SLOWDOWN
        return self._gpu("nvmlDeviceGetTemperatureThreshold", h)["temperature_slowdown"]

    def nvmlDeviceGetFanSpeed(self, h: Any) -> int:
        return self._gpu("nvmlDeviceGetFanSpeed", h)["fan"]

    def nvmlDeviceGetPowerUsage(self, h: Any) -> int:
        return self._gpu("nvmlDeviceGetPowerUsage", h)["power_mw"]

    def nvmlDeviceGetTotalEnergyConsumption(self, h: Any) -> int:
        return self._gpu("nvmlDeviceGetTotalEnergyConsumption", h)["energy_mj"]

    def nvmlDeviceGetClockInfo(self, h: Any, kind: int) -> int:
        return self._gpu("nvmlDeviceGetClockInfo", h)["clocks"][kind]

    def nvmlDeviceGetPerformanceState(self, h: Any) -> int:
        return self._gpu("nvmlDeviceGetPerformanceState", h)["pstate"]

    def nvmlDeviceGetCurrentClocksEventReasons(self, h: Any) -> int:
        return self._gpu("nvmlDeviceGetCurrentClocksEventReasons", h)["reasons"]

    def nvmlDeviceGetCurrentClocksThrottleReasons(self, h: Any) -> int:
        return self._gpu("nvmlDeviceGetCurrentClocksThrottleReasons", h)["reasons"]

    # -- slow ---------------------------------------------------------------------------------
    def nvmlDeviceGetPcieThroughput(self, h: Any, counter: int) -> int:
        return self._gpu("nvmlDeviceGetPcieThroughput", h)["pcie_kbps"][counter]

    def _procs(self, fn: str, h: Any, key: str) -> list[Any]:
        return [SimpleNamespace(pid=pid, usedGpuMemory=mem) for pid, mem in self._gpu(fn, h)[key]]

    def nvmlDeviceGetComputeRunningProcesses_v3(self, h: Any) -> list[Any]:
        return self._procs("nvmlDeviceGetComputeRunningProcesses_v3", h, "procs")

    def nvmlDeviceGetGraphicsRunningProcesses_v3(self, h: Any) -> list[Any]:
        return self._procs("nvmlDeviceGetGraphicsRunningProcesses_v3", h, "graphics_procs")

    def nvmlDeviceGetComputeRunningProcesses_v2(self, h: Any) -> list[Any]:
        return self._procs("nvmlDeviceGetComputeRunningProcesses_v2", h, "procs")

    def nvmlDeviceGetGraphicsRunningProcesses_v2(self, h: Any) -> list[Any]:
        return self._procs("nvmlDeviceGetGraphicsRunningProcesses_v2", h, "graphics_procs")
