"""Busy is not used, on a real GPU: two CUDA loops read through our NVML layer.

1. large matrix multiplications (bf16, tensor cores): busy ~100 %, SM active >= 80 %;
2. one tiny kernel (one block, one thread, spinning) launched again and again: busy ~100 %, SM
   active <= 10 % (one SM of ~132 has work).

For each, the figures gpu-widgets reads while the loop runs: busy (NVML utilization), SM active,
SM occupancy, tensor active, DRAM active (GPM), and this process's own sm_percent and
memory_bandwidth_percent (per-process use). Part of ``benchmarks.gpu_check``; on a machine without
CUDA it runs the loops on the CPU with ``allow_cpu`` (a dry run of the plumbing: the readings
are then whatever the driver, real or fake, reports).
"""
from __future__ import annotations

import os
import statistics
import threading
import time
from typing import Any, Callable

from gpu_widgets.metrics.fields import GPM_FIELDS

# What the issue expects of each loop: field -> (lowest, highest) percent.
EXPECTED = {
    "matmul": {"utilization_gpu_percent": (95, 100), "sm_active_percent": (80, 100)},
    "one-block kernel": {"utilization_gpu_percent": (95, 100), "sm_active_percent": (0, 10)},
}
SPIN = """
template <typename T> T spin(T x) {
    for (int i = 0; i < 200000; ++i) { x = x * T(0.9999999) + T(1e-7); }
    return x;
}
"""


def _loops(torch: Any, device: str) -> dict[str, Callable[[threading.Event], None]]:
    def matmul(stop: threading.Event) -> None:
        dtype = torch.bfloat16 if device == "cuda" else torch.float32
        n = 8192 if device == "cuda" else 256
        a = torch.randn(n, n, device=device, dtype=dtype)
        b = torch.randn(n, n, device=device, dtype=dtype)
        while not stop.is_set():
            for _ in range(20):
                a @ b
            if device == "cuda":
                torch.cuda.synchronize()  # keep the queue short so the loop stops on time

    def one_block(stop: threading.Event) -> None:
        x = torch.zeros(1, device=device)  # one element: one block of one thread
        if device == "cuda":
            try:
                kernel = torch.cuda.jiterator._create_jit_fn(SPIN)  # a kernel that runs ~ms on one thread
            except Exception:  # no NVRTC: a tiny add, launched back to back, is the fallback
                kernel = None
        else:
            kernel = None
        while not stop.is_set():
            for _ in range(50):
                x = kernel(x) if kernel is not None else x.add_(1.0)
            if device == "cuda":
                torch.cuda.synchronize()

    return {"matmul": matmul, "one-block kernel": one_block}


def _read(backend: Any, seconds: float) -> dict[str, Any]:
    """Readings every 0.5 s for ``seconds``, GPM asked for: medians per field, and our process."""
    backend.gpm = True
    backend.read_slow(time.time())  # the first GPM sample
    series: dict[str, list[float]] = {f: [] for f in ("utilization_gpu_percent", *GPM_FIELDS)}
    mine: dict[str, list[float]] = {"sm_percent": [], "memory_bandwidth_percent": []}
    reasons: dict[str, str] = {}
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        time.sleep(0.5)
        fast, slow = backend.read_fast(time.time())[0], backend.read_slow(time.time())
        part = slow[0] if slow else {}
        for f in series:
            value = fast.get(f) if f in fast else part.get(f)
            if value is not None:
                series[f].append(value)
            else:
                reasons[f] = (part.get("unavailable") or fast.get("unavailable") or {}).get(f, "not read")
        for p in part.get("processes") or ():
            if p["pid"] == os.getpid():
                for k in mine:
                    if p.get(k) is not None:
                        mine[k].append(p[k])
    out: dict[str, Any] = {f: (statistics.median(v) if v else None) for f, v in series.items()}
    out["this_process"] = {k: (statistics.median(v) if v else None) for k, v in mine.items()}
    out["samples"] = len(series["utilization_gpu_percent"])
    if reasons:
        out["unavailable"] = reasons
    return out


class Skipped(Exception):
    """Why a check cannot run on this machine (its result says so instead of failing)."""


def torch_device(allow_cpu: bool) -> tuple[Any, str]:
    """torch and the device a check runs on: "cuda", else "cpu" when allowed; Skipped says why neither."""
    try:
        import torch
    except ImportError:
        raise Skipped("torch is not installed (pip install torch)") from None
    if torch.cuda.is_available():
        return torch, "cuda"
    if allow_cpu:
        return torch, "cpu"
    raise Skipped("torch.cuda.is_available() is False")


def busy_vs_sm_active(seconds: float = 10.0, allow_cpu: bool = False) -> dict[str, Any]:
    """Run each loop for ``seconds`` while reading; say whether each expectation was met."""
    try:
        torch, device = torch_device(allow_cpu)
    except Skipped as exc:
        return {"skipped": str(exc)}
    from gpu_widgets.backends import open_backend

    backend = open_backend("nvml")
    if backend.status != "ok":
        return {"skipped": f"NVML backend not usable: {backend.reason}"}
    out: dict[str, Any] = {"device": device, "gpu": backend.device_info()[0].get("name")}
    for name, loop in _loops(torch, device).items():
        stop = threading.Event()
        worker = threading.Thread(target=loop, args=(stop,), name=f"gpm-check {name}", daemon=True)
        worker.start()
        time.sleep(1.0)  # let the loop fill the GPU before the first sample
        try:
            readings = _read(backend, seconds)
        finally:
            stop.set()
            worker.join(30)
        checks = {}
        for field, (lo, hi) in EXPECTED[name].items():
            v = readings.get(field)
            checks[field] = "not read" if v is None else ("met" if lo <= v <= hi else "MISSED")
        out[name] = {**readings, "expected": EXPECTED[name], "checks": checks}
        time.sleep(2.0)  # idle between the loops, so one's tail does not colour the other
    backend.close()
    return out


def lines(result: dict[str, Any]) -> list[str]:
    """A short table for the terminal."""
    if "skipped" in result or "error" in result:
        return [f"busy vs SM active: {result.get('skipped') or result.get('error')}"]
    rows = [f"busy vs SM active on {result.get('gpu')} ({result['device']}):",
            "loop               busy   SM act  SM occ  tensor  DRAM   this process SM / mem-bw  checks"]

    def pct(v: Any) -> str:
        return "  n/a " if v is None else f"{v:5.1f}%"

    for name in EXPECTED:
        r = result.get(name) or {}
        me = r.get("this_process") or {}
        rows.append(f"{name:<18} {pct(r.get('utilization_gpu_percent'))} {pct(r.get('sm_active_percent'))}  "
                    f"{pct(r.get('sm_occupancy_percent'))}  {pct(r.get('tensor_active_percent'))} "
                    f"{pct(r.get('dram_active_percent'))}  {pct(me.get('sm_percent'))} / "
                    f"{pct(me.get('memory_bandwidth_percent'))}          {r.get('checks')}")
    return rows
