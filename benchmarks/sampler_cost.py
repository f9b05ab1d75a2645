"""1. Sampler cost: CPU time per full sample of 8 GPUs with 8 processes each, every contender on
the same fake libnvidia-ml.so.1 with the same values.

Each contender runs in its own worker process (imports have side effects: gpustat patches
pynvml, jupyterlab-nvdashboard initialises NVML on import), and the orchestrator interleaves
batches of samples across the workers in a fresh random order each round. CPU time is the
worker's process time (all its threads) over a batch; NVML calls are counted by the fake
library itself (``fakeNvmlCallCount``), which is exact and free of noise.

    python -m benchmarks.sampler_cost --worker NAME   # a worker (the orchestrator starts these)
"""
from __future__ import annotations

import argparse
import ctypes
import gc
import logging
import math
import sys
import time
from typing import Any, Callable

from .common import FakeDriver, Worker, WorkerError, interleaved, median, peer_available, peers_python, serve, summary

# name -> (python module that must be importable in the peers venv, or None for ours)
CONTENDERS: dict[str, str | None] = {
    "floor": None,
    "gpu-widgets": None,
    "nvitop": "nvitop",
    "gpustat": "gpustat",
    "jupyterlab-nvdashboard": "jupyterlab_nvdashboard",
}

MODES: dict[str, dict[str, str]] = {
    "floor": {
        "full": "the pynvml calls of one fast tick + one slow read, in a bare loop, results dropped",
        "fast": "the pynvml calls of one fast tick (12 per GPU)",
        "slow": "the pynvml calls of one slow read (PCIe x2, process lists)",
    },
    "gpu-widgets": {
        "full": "Sampler: one slow read (PCIe, processes + psutil details) and one tick (fast fields, "
                "compose, history append)",
        "fast": "Sampler.tick(): fast fields of 8 GPUs, compose, history append",
        "slow": "the slow thread's read: PCIe throughput and processes (with psutil details)",
        "full_gpm": "as full, with GPM asked for (Sampler.want_gpm): + a GPM sample and 4 metrics per GPU, "
                    "per-process use",
    },
    "nvitop": {
        "full": "take_snapshots(devices): device snapshots + GPU process snapshots (long-lived Device objects)",
        "devices": "[d.as_snapshot() for d in devices] (no processes)",
    },
    "gpustat": {
        "full": "GPUStatCollection.new_query() (CPU only: its 0.1 s sleep per GPU is not CPU)",
    },
    "jupyterlab-nvdashboard": {
        "full": "one update of each GPU panel's handler: gpu_utilization, gpu_usage, gpu_resource, pci_stats",
        "gpu_resource": "one update of the gpu_resource handler (the 'GPU Resources' panel)",
    },
}


# ---------------------------------------------------------------------------------------------------
# Worker side: build each contender's sample functions
# ---------------------------------------------------------------------------------------------------
def _floor() -> dict[str, Callable[[], None]]:
    import pynvml as nv

    nv.nvmlInit()
    handles = [nv.nvmlDeviceGetHandleByIndex(i) for i in range(nv.nvmlDeviceGetCount())]
    v2 = nv.nvmlMemory_v2

    def fast() -> None:
        for h in handles:
            nv.nvmlDeviceGetUtilizationRates(h)
            nv.nvmlDeviceGetMemoryInfo(h, version=v2)
            nv.nvmlDeviceGetTemperature(h, 0)
            nv.nvmlDeviceGetFanSpeed(h)
            nv.nvmlDeviceGetPowerUsage(h)
            nv.nvmlDeviceGetEnforcedPowerLimit(h)
            nv.nvmlDeviceGetTotalEnergyConsumption(h)
            nv.nvmlDeviceGetClockInfo(h, 1)
            nv.nvmlDeviceGetClockInfo(h, 2)
            nv.nvmlDeviceGetClockInfo(h, 0)
            nv.nvmlDeviceGetPerformanceState(h)
            nv.nvmlDeviceGetCurrentClocksEventReasons(h)

    def slow() -> None:
        for h in handles:
            nv.nvmlDeviceGetPcieThroughput(h, 0)
            nv.nvmlDeviceGetPcieThroughput(h, 1)
            nv.nvmlDeviceGetTemperatureThreshold(h, 1)  # the slowdown temperature
            nv.nvmlDeviceGetComputeRunningProcesses_v3(h)
            nv.nvmlDeviceGetGraphicsRunningProcesses_v3(h)

    def full() -> None:
        fast()
        slow()

    return {"full": full, "fast": fast, "slow": slow}


def _ours() -> dict[str, Callable[[], None]]:
    from gpu_widgets.backends.nvml import NvmlBackend
    from gpu_widgets.sampling.sampler import Sampler

    backend = NvmlBackend()
    # A sampler as the server has it, with its threads stopped: we call what they call.
    sampler = Sampler(backend, interval_s=1.0, window_s=3600.0)
    sampler.start()
    sampler.stop()
    if backend.status != "ok":
        raise RuntimeError(f"the NVML backend did not open on the fake driver: {backend.reason}")

    def full() -> None:
        sampler._read_slow()
        sampler.tick()

    # Its own backend and sampler, asked for GPM for good: each read compares with the previous one,
    # the steady state of a sidebar that is open (the first, off, sampler never pays for it).
    looked = Sampler(NvmlBackend(), interval_s=1.0, window_s=3600.0)
    looked.start()
    looked.stop()
    looked.want_gpm("benchmark", lease_s=None)

    def full_gpm() -> None:
        looked._read_slow()
        looked.tick()

    return {"full": full, "fast": sampler.tick, "slow": sampler._read_slow, "full_gpm": full_gpm}


def _nvitop() -> dict[str, Callable[[], None]]:
    logging.getLogger("nvitop").setLevel(logging.CRITICAL)  # it logs each function the fake lacks once
    from nvitop import Device, take_snapshots

    devices = Device.all()

    def full() -> None:
        take_snapshots(devices)

    def devs() -> None:
        for d in devices:
            d.as_snapshot()

    return {"full": full, "devices": devs}


def _gpustat() -> dict[str, Callable[[], None]]:
    from gpustat import GPUStatCollection

    return {"full": GPUStatCollection.new_query}


def _nvdashboard() -> dict[str, Callable[[], None]]:
    import pynvml

    # On import it asks nvmlDeviceGetNvLinkVersion and catches only NotSupported: on a PCIe GPU
    # the real driver answers NotSupported; the fake library does not export the function
    # (FunctionNotFound would make the import fail), so answer as a PCIe H100's driver does.
    try:
        pynvml.nvmlInit()
        pynvml._nvmlGetFunctionPointer("nvmlDeviceGetNvLinkVersion")
    except pynvml.NVMLError_FunctionNotFound:
        def no_nvlink(handle: Any, link: int) -> int:
            raise pynvml.NVMLError(pynvml.NVML_ERROR_NOT_SUPPORTED)

        pynvml.nvmlDeviceGetNvLinkVersion = no_nvlink
    from jupyterlab_nvdashboard.apps import gpu

    sent: list[int] = []

    def handler(cls: type) -> Callable[[], None]:
        h = cls.__new__(cls)  # no server, no socket: send_data only builds and "writes" the message
        h.write_message = lambda message: sent.append(len(message))
        return h.send_data

    util, usage = handler(gpu.GPUUtilizationWebSocketHandler), handler(gpu.GPUUsageWebSocketHandler)
    resource, pci = handler(gpu.GPUResourceWebSocketHandler), handler(gpu.PCIStatsWebSocketHandler)

    def full() -> None:
        util()
        usage()
        resource()
        pci()
        del sent[:]

    def gpu_resource() -> None:
        resource()
        del sent[:]

    return {"full": full, "gpu_resource": gpu_resource}


BUILDERS = {"floor": _floor, "gpu-widgets": _ours, "nvitop": _nvitop, "gpustat": _gpustat,
            "jupyterlab-nvdashboard": _nvdashboard}


class _Counting:
    """Counts pynvml's function look-ups (one per NVML call) and which fail (not in the fake)."""

    def __init__(self) -> None:
        import pynvml

        self.pynvml = pynvml
        self.lookups = 0
        self.missing: dict[str, int] = {}
        self._patched: list[tuple[Any, Any]] = []

    def __enter__(self) -> "_Counting":
        current = self.pynvml._nvmlGetFunctionPointer
        not_found = self.pynvml.NVMLError_FunctionNotFound

        def counting(name: str) -> Any:
            self.lookups += 1
            try:
                return current(name)
            except not_found:
                self.missing[name] = self.missing.get(name, 0) + 1
                raise

        for module in list(sys.modules.values()):
            if getattr(module, "_nvmlGetFunctionPointer", None) is current:
                self._patched.append((module, current))
                module._nvmlGetFunctionPointer = counting
        return self

    def __exit__(self, *exc: object) -> None:
        for module, original in self._patched:
            module._nvmlGetFunctionPointer = original


def worker(name: str) -> None:
    modes = BUILDERS[name]()
    from tests.fake_nvml import exported_functions

    lib = ctypes.CDLL("libnvidia-ml.so.1")
    lib.fakeNvmlCallCount.restype = ctypes.c_ulonglong
    lib.fakeNvmlCallCount.argtypes = [ctypes.c_char_p]
    names = sorted(exported_functions())

    for fn in modes.values():  # warm up: caches, first-time look-ups, lazily built objects
        for _ in range(2):
            fn()

    def calls(mode: str) -> dict[str, Any]:
        """NVML calls of one sample: answered by the fake (per function), and look-ups of functions
        the fake does not export (a real driver would answer those)."""
        fn = modes[mode]
        lib.fakeNvmlResetCallCounts()
        with _Counting() as counting:
            fn()
        per_fn = {n: int(lib.fakeNvmlCallCount(n.encode())) for n in names}
        per_fn = {n: c for n, c in per_fn.items() if c}
        return {"answered": int(lib.fakeNvmlCallCount(b"*")), "per_function": per_fn,
                "not_in_fake": sum(counting.missing.values()), "missing_functions": sorted(counting.missing)}

    def run(mode: str, k: int) -> dict[str, Any]:
        fn = modes[mode]
        gc.collect()
        c0, w0 = time.process_time_ns(), time.perf_counter_ns()
        for _ in range(k):
            fn()
        c1, w1 = time.process_time_ns(), time.perf_counter_ns()
        return {"cpu_us": (c1 - c0) / 1e3 / k, "wall_us": (w1 - w0) / 1e3 / k}

    import pynvml

    serve({
        "info": lambda: {"modes": list(modes), "pynvml": getattr(pynvml, "__file__", "")},
        "calls": calls,
        "run": run,
    })


# ---------------------------------------------------------------------------------------------------
# Orchestrator
# ---------------------------------------------------------------------------------------------------
def measure(smoke: bool = False, with_peers: bool = True, log: Callable[[str], None] = print) -> dict[str, Any]:
    rounds = 2 if smoke else 15
    batch_cpu_s = 0.005 if smoke else 0.05
    peers_py, why_no_peers = peers_python()
    python = peers_py if (with_peers and peers_py is not None) else sys.executable
    result: dict[str, Any] = {"python": str(python), "rounds": rounds, "contenders": {}, "skipped": {},
                              "modes": MODES}
    with FakeDriver() as driver:
        env = driver.env()
        workers: dict[str, Worker] = {}
        try:
            for name, module in CONTENDERS.items():
                if module is not None:
                    if not with_peers:
                        result["skipped"][name] = "peers disabled (--no-peers)"
                        continue
                    ok, why = peer_available(peers_py, module)
                    if not ok:
                        result["skipped"][name] = why
                        continue
                w = Worker(python, "benchmarks.sampler_cost", ["--worker", name], env)
                try:
                    w.call(op="info")
                except WorkerError as exc:
                    result["skipped"][name] = f"failed to start on the fake driver: {exc}"
                    w.close()
                    continue
                workers[name] = w
            log(f"  sampler: contenders {', '.join(workers)}; {rounds} interleaved rounds")
            # calls and batch sizes
            plan: list[tuple[str, str]] = []
            ks: dict[tuple[str, str], int] = {}
            for name, w in workers.items():
                entry: dict[str, Any] = {"modes": {}}
                for mode in w.call(op="info")["modes"]:
                    probe = [w.call(op="run", mode=mode, k=1) for _ in range(2)]
                    cpu = max(1.0, min(p["cpu_us"] for p in probe))
                    wall = max(1.0, min(p["wall_us"] for p in probe))
                    k = max(1, min(math.ceil(batch_cpu_s * 1e6 / cpu), math.ceil(0.3e6 / wall), 2000))
                    ks[(name, mode)] = k
                    entry["modes"][mode] = {"calls": w.call(op="calls", mode=mode), "batch": k, "cpu_us": [],
                                            "wall_us": []}
                    plan.append((name, mode))
                result["contenders"][name] = entry
            for r, (name, mode) in interleaved(plan, rounds):
                out = workers[name].call(op="run", mode=mode, k=ks[(name, mode)])
                m = result["contenders"][name]["modes"][mode]
                m["cpu_us"].append(out["cpu_us"])
                m["wall_us"].append(out["wall_us"])
        finally:
            for w in workers.values():
                w.close()
    for name, entry in result["contenders"].items():
        for mode, m in entry["modes"].items():
            m["cpu_us_summary"] = summary(m["cpu_us"])
            m["wall_us_summary"] = summary(m["wall_us"])
    result["ratios"] = _ratios(result)
    result["targets"] = _targets(result)
    return result


def _per_round(result: dict[str, Any], a: tuple[str, str], b: tuple[str, str]) -> dict[str, Any] | None:
    """a / b per round (paired within a round), summarised."""
    c = result["contenders"]
    if a[0] not in c or b[0] not in c:
        return None
    xs, ys = c[a[0]]["modes"][a[1]]["cpu_us"], c[b[0]]["modes"][b[1]]["cpu_us"]
    ratios = [x / y for x, y in zip(xs, ys) if y > 0]
    return summary(ratios)


def _ratios(result: dict[str, Any]) -> dict[str, Any]:
    gw = "gpu-widgets"
    pairs = {
        "gpu-widgets / floor (full sample)": ((gw, "full"), ("floor", "full")),
        "gpu-widgets / floor (fast tick)": ((gw, "fast"), ("floor", "fast")),
        "gpu-widgets / floor (slow read)": ((gw, "slow"), ("floor", "slow")),
        "gpu-widgets GPM on / off (full sample)": ((gw, "full_gpm"), (gw, "full")),
        "nvitop / gpu-widgets (full sample)": (("nvitop", "full"), (gw, "full")),
        "nvitop devices only / gpu-widgets fast tick": (("nvitop", "devices"), (gw, "fast")),
        "gpustat / gpu-widgets (full sample)": (("gpustat", "full"), (gw, "full")),
        "nvdashboard all GPU panels / gpu-widgets (full sample)": (("jupyterlab-nvdashboard", "full"), (gw, "full")),
    }
    out = {}
    for label, (a, b) in pairs.items():
        s = _per_round(result, a, b)
        if s is not None and s["n"]:
            out[label] = s
    return out


def _targets(result: dict[str, Any]) -> list[dict[str, Any]]:
    r = result["ratios"]
    out = []

    def add(target: str, label: str, limit: float, above: bool) -> None:
        s = r.get(label)
        if s is None:
            out.append({"target": target, "status": "not measured", "detail": result["skipped"].get(
                label.split(" ")[0], "contender skipped")})
            return
        value = s["median"]
        met = value >= limit if above else value <= limit
        out.append({"target": target, "status": "met" if met else "MISSED", "value": value,
                    "spread": [s["p25"], s["p75"]], "limit": limit, "measure": label})

    add("sampler <= 1.5x the floor (full sample)", "gpu-widgets / floor (full sample)", 1.5, False)
    add("sampler <= 1.5x the floor (fast tick)", "gpu-widgets / floor (fast tick)", 1.5, False)
    add(">= 5x cheaper than nvitop", "nvitop / gpu-widgets (full sample)", 5.0, True)
    add(">= 10x cheaper than gpustat", "gpustat / gpu-widgets (full sample)", 10.0, True)
    return out


def table(result: dict[str, Any]) -> list[str]:
    lines = [
        "| contender | what one sample is | CPU µs / sample (median) | p25-p75 | NVML calls answered | calls to functions the fake lacks |",
        "| --- | --- | ---: | ---: | ---: | ---: |",
    ]
    for name, entry in result["contenders"].items():
        for mode, m in entry["modes"].items():
            s = m["cpu_us_summary"]
            calls = m["calls"]
            lines.append(
                f"| {name} | {mode}: {MODES[name][mode]} | {s['median']:,.0f} | {s['p25']:,.0f}-{s['p75']:,.0f} | "
                f"{calls['answered']} | {calls['not_in_fake']} |"
            )
    lines += ["", "| ratio (paired per round) | median | p25-p75 |", "| --- | ---: | ---: |"]
    for label, s in result["ratios"].items():
        lines.append(f"| {label} | {s['median']:.2f}x | {s['p25']:.2f}-{s['p75']:.2f} |")
    for name, why in result["skipped"].items():
        lines.append(f"\nskipped {name}: {why}")
    return lines


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--worker", choices=sorted(BUILDERS))
    args = parser.parse_args()
    if args.worker:
        worker(args.worker)
    else:
        print("\n".join(table(measure())))


if __name__ == "__main__":
    main()
