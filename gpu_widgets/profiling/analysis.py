"""From a profiler trace (and the NVML samples of the same window) to one verdict.

The profiled steps are the trace's host ``ProfilerStep#N`` spans (``prof.step()``; the copies
Kineto draws on the GPU's timeline are not steps), else the span of its host events as one step.
Each instant of those steps is given to the first of PRIORITY: GPU kernels, host-device copies
(the GPU is busy: nothing the host does then costs time), waiting for data (the DataLoader's
``enumerate(DataLoader)#...__next__`` spans, or the monitor's own data wait), host
synchronisations (with the GPU idle), CPU ops (ops, CUDA runtime calls: dispatch, and on a CPU
the ops' own work), idle gaps (Python between ops, sleeping). The shares of these sum to 1
(``breakdown``, keyed in BREAKDOWN's order). The verdicts are tried in the order of
VERDICTS (the first that holds wins), with the thresholds below; docs/profile.md explains each.
"""
from __future__ import annotations

import bisect
import re
import sys
from collections import Counter, defaultdict
from collections.abc import Iterable, Mapping
from typing import Any

from . import intervals as iv
from .result import BREAKDOWN, Profile
from .trace_file import Event, Trace

STEP_PREFIX = "ProfilerStep#"
LOADER_PREFIX = "enumerate(DataLoader)#"
GPU_KERNEL, GPU_COPY = frozenset({"kernel"}), frozenset({"gpu_memcpy", "gpu_memset"})
HOST_WORK = frozenset({"cpu_op", "cuda_runtime", "cuda_driver", "user_annotation"})
STEP_CATS = frozenset({"user_annotation", "cpu_op"})  # older torch wrote ProfilerStep#N as a cpu_op
PRIORITY = ("gpu_kernels", "copies", "data_wait", "syncs", "cpu_ops")  # the rest is "idle"
SYNC_CALLS = frozenset({"cudaStreamSynchronize", "cudaDeviceSynchronize", "cudaEventSynchronize", "cudaMemcpy",
                        "cuStreamSynchronize", "cuCtxSynchronize", "cuEventSynchronize", "cuMemcpyDtoH_v2"})
SYNC_OPS = frozenset({"aten::item", "aten::_local_scalar_dense"})

INPUT_SHARE = 0.30  # input-bound: the data wait's share of the steps
SYNC_PER_STEP = 1.0  # sync-bound: at least one host synchronisation a step ...
SYNC_IDLE_SHARE = 0.30  # ... after which the GPU sits idle this share of the steps
COPY_SHARE = 0.30  # copy-bound: copies (not under a kernel) this share of the steps
LAUNCH_OPS = 1000  # launch-bound: this many ops (or kernels) a step ...
LAUNCH_MEAN_US = 50.0  # ... of this mean length at most ...
LAUNCH_SHARE = 0.50  # ... their dispatch this share of the steps, the GPU's kernels under it
FP32_SHARE = 0.30  # fp32-matmul: fp32 matmul/conv kernels' share of the kernel time ...
TENSOR_LOW = 5.0  # ... with tensor activity (GPM) under this percent, where it was read
POWER_CAP_NOTE = 0.20  # the sentence adds the power cap when the clocks were held this share
BUSY_NOTE, SM_NOTE = 80.0, 20.0  # ... and "busy X % but SM active Y %" past these
TOP_OPS = 10

_FRAME = re.compile(r"^(?P<file>[^<>()]+)\((?P<line>\d+)\): (?P<func>.+)$")
_FP32_GEMM = re.compile(r"sgemm|gemm_f32f32|simt.*gemm|fp32.*gemm|scudnn|sconv|f32f32_f32", re.I)
_LOW_PRECISION = re.compile(r"tf32|bf16|fp16|f16|h\d*gemm|hgemm|s1688|s16816|tensorop|int8|i8i8|fp8|e4m3|e5m2", re.I)


def analyze(trace: Trace, *, data_wait_s: float | None = None,
            gpu_rows: Iterable[Mapping[str, Any]] = ()) -> Profile:
    events = trace.events
    marked = [e for e in events if e.cat in STEP_CATS and e.name.startswith(STEP_PREFIX)]
    steps = [(e.ts, e.end) for e in marked if e.dur > 0]
    host = [e for e in events if e.cat in HOST_WORK or e.cat == "python_function"]
    if marked and not steps:
        raise ValueError(f"the trace's {len(marked)} ProfilerStep# span{'s' if len(marked) > 1 else ''} last no time: "
                         "profile at least one whole step")
    if not steps:
        if not host:
            raise ValueError("the trace has no host events and no ProfilerStep#: nothing was profiled")
        steps = [(min(e.ts for e in host), max(e.end for e in host))]
    windows = iv.union(steps)
    wall = iv.total(windows)
    if wall <= 0:
        raise ValueError("the trace's profiled steps last no time: profile at least one step")
    n = len(steps)
    kernels = [e for e in events if e.cat in GPU_KERNEL]
    copies = [e for e in events if e.cat in GPU_COPY]
    gpu = bool(kernels or copies)
    syncs = _syncs(host, copies, gpu)
    spans = {
        "data_wait": iv.union((e.ts, e.end) for e in host if e.name.startswith(LOADER_PREFIX)),
        "gpu_kernels": iv.union((e.ts, e.end) for e in kernels),
        "copies": iv.union((e.ts, e.end) for e in copies),
        "syncs": iv.union((e.ts, e.end) for e in syncs),
        "cpu_ops": iv.union((e.ts, e.end) for e in host if e.cat in HOST_WORK and not _marker(e)),
    }
    shares, left = {}, windows
    for name in PRIORITY:
        part = iv.intersect(left, spans[name])
        shares[name] = iv.total(part) / wall
        left = iv.subtract(left, part)
    shares["idle"] = iv.total(left) / wall
    breakdown = {k: shares[k] for k in BREAKDOWN}
    if data_wait_s is not None and data_wait_s > 0 and not spans["data_wait"]:
        _use_wait(breakdown, min(1.0, data_wait_s * 1e6 / wall))  # a loop without a DataLoader: the monitor's wait

    ev: dict[str, Any] = {"steps": n, "step_ms": wall / n / 1000, "gpu_activity": gpu,
                          "data_wait_share": breakdown["data_wait"]}
    ev.update(_sync_evidence(syncs, host, kernels + copies, windows, n, wall))
    ev.update(_copy_evidence(copies, spans["gpu_kernels"], breakdown))
    ev.update(_launch_evidence(host, kernels, windows, n))
    ev.update(_fp32_evidence(kernels, trace.devices))
    ev.update(_nvml_evidence(list(gpu_rows)))
    verdict, sentence = _verdict(ev, breakdown)
    profile = Profile(verdict, sentence + _nvml_note(ev) + ".", ev, breakdown, _top_ops(host, kernels, windows, n), n)
    return profile


def _marker(e: Event) -> bool:
    return e.cat in STEP_CATS and (e.name.startswith(STEP_PREFIX) or e.name.startswith(LOADER_PREFIX))


def _syncs(host: list[Event], copies: list[Event], gpu: bool) -> list[Event]:
    """Host calls that wait for the GPU: the runtime's synchronising calls, else (a trace without
    runtime events) the outermost ``.item()`` ops a device-to-host copy ran inside (an ``.item()``
    on a CPU tensor waits for nothing)."""
    if not gpu:
        return []
    calls = [e for e in host if e.cat in ("cuda_runtime", "cuda_driver") and e.name in SYNC_CALLS]
    if calls:
        return calls
    d2h = iv.union((e.ts, e.end) for e in copies if "DtoH" in e.name)
    items = _outermost([e for e in host if e.cat == "cpu_op" and e.name in SYNC_OPS])
    return [e for e in items if iv.intersect([(e.ts, e.end)], _near(d2h, e.ts, e.end))]


def _near(spans: iv.Spans, a: float, b: float) -> iv.Spans:
    """The spans of a sorted disjoint list that may meet [a, b] (a bisect, not a scan)."""
    k = bisect.bisect_left(spans, (a, float("-inf")))
    return spans[max(0, k - 1):bisect.bisect_right(spans, (b, float("inf")))]


def _use_wait(breakdown: dict[str, float], share: float) -> None:
    """The monitor measured a data wait the trace cannot see: it takes its share from the host's
    parts (syncs, CPU ops, idle), never from the GPU's (a wait the GPU's work hid cost nothing)."""
    host = ("syncs", "cpu_ops", "idle")
    room = sum(breakdown[k] for k in host)
    take = min(share, room)
    for k in host:
        breakdown[k] *= (room - take) / room if room > 0 else 0.0
    breakdown["data_wait"] += take


def _in(windows: iv.Spans, t: float) -> tuple[float, float] | None:
    k = bisect.bisect_right(windows, (t, float("inf"))) - 1
    return windows[k] if k >= 0 and windows[k][0] <= t <= windows[k][1] else None


def _sync_evidence(syncs: list[Event], host: list[Event], gpu_events: list[Event], windows: iv.Spans, n: int,
                   wall: float) -> dict[str, Any]:
    calls = [e for e in syncs if _in(windows, e.ts)]
    if not calls:
        return {"syncs_per_step": 0.0, "gpu_idle_after_sync_share": 0.0, "sync_op": None, "sync_frame": None}
    busy = iv.union((e.ts, e.end) for e in gpu_events)
    starts = [a for a, _ in busy]
    idle = []
    for e in calls:  # from the sync's end to the GPU's next work (none while a kernel still runs)
        window = _in(windows, e.ts)
        assert window is not None
        k = bisect.bisect_right(starts, e.end)
        if k and busy[k - 1][1] > e.end:
            continue
        idle.append((e.end, min(starts[k] if k < len(starts) else window[1], window[1])))
    op, frame = _named(calls, host)
    return {"syncs_per_step": len(calls) / n, "gpu_idle_after_sync_share": iv.total(iv.union(idle)) / wall,
            "sync_op": op, "sync_frame": frame}


def _named(calls: list[Event], host: list[Event]) -> tuple[str | None, str | None]:
    """The op (outermost enclosing aten op) and the user's frame (innermost python_function of the
    user's code, else of a library outside torch) most of the syncs were made in: one sweep a
    thread, a stack of the open events."""
    wanted = {id(e) for e in calls}
    by_thread: dict[Any, list[Event]] = defaultdict(list)
    for e in host:
        if e.cat in ("cpu_op", "python_function") or id(e) in wanted:
            by_thread[(e.pid, e.tid)].append(e)
    ops, frames = Counter(), Counter()
    for evs in by_thread.values():
        stack: list[Event] = []
        for e in sorted(evs, key=lambda e: (e.ts, -e.dur)):
            while stack and stack[-1].end <= e.ts:
                stack.pop()
            if id(e) in wanted:
                aten = [a for a in stack if a.cat == "cpu_op"]
                ops[aten[0].name if aten else e.name] += 1
                ranked = [(_frame_rank(f.name), i) for i, f in enumerate(stack) if f.cat == "python_function"]
                ranked = [r for r in ranked if r[0] > 0]
                if ranked:
                    frames[stack[max(ranked)[1]].name] += 1
            stack.append(e)
    return (ops.most_common(1)[0][0] if ops else None), (frames.most_common(1)[0][0] if frames else None)


_LIBRARIES = ("site-packages/", "dist-packages/", "gpu_widgets/", "lightning/", "transformers/",
              "accelerate/", "keras/")


def _frame_rank(name: str) -> int:
    """2: the user's own code; 1: the standard library or a training framework; 0: torch itself,
    built-ins and frozen modules (a frame named "file.py(line): function", its file relative to the
    sys.path entry it came from, as torch.profiler writes it)."""
    m = _FRAME.match(name)
    if m is None:
        return 0
    path = m.group("file").replace("\\", "/")
    if path.startswith("torch/") or "/torch/" in path or "gpu_widgets/" in path:
        return 0
    top = path.lstrip("/").split("/")[0].removesuffix(".py")
    if any(part in path for part in _LIBRARIES) or (path == path.lstrip("/") and top in sys.stdlib_module_names):
        return 1
    return 2


def _copy_evidence(copies: list[Event], kernel_spans: iv.Spans, breakdown: dict[str, float]) -> dict[str, Any]:
    h2d = [e for e in copies if "HtoD" in e.name]
    spans = iv.union((e.ts, e.end) for e in copies)
    busy = iv.total(spans)
    return {"copy_share": breakdown["copies"], "h2d_copies": len(h2d),
            "pageable_copies": sum("Pageable" in e.name for e in copies),
            "copy_overlap_share": iv.total(iv.intersect(spans, kernel_spans)) / busy if busy else None}


def _launch_evidence(host: list[Event], kernels: list[Event], windows: iv.Spans, n: int) -> dict[str, Any]:
    top = [e for e in _outermost([e for e in host if e.cat == "cpu_op" and not _marker(e)]) if _in(windows, e.ts)]
    in_steps = [e for e in kernels if _in(windows, e.ts)]
    return {"ops_per_step": len(top) / n,
            "op_mean_us": sum(e.dur for e in top) / len(top) if top else None,
            "kernels_per_step": len(in_steps) / n,
            "kernel_mean_us": sum(e.dur for e in in_steps) / len(in_steps) if in_steps else None}


def _outermost(ops: list[Event]) -> list[Event]:
    """Ops not inside another op of their thread (what the loop itself called)."""
    out: list[Event] = []
    by_thread: dict[Any, list[Event]] = defaultdict(list)
    for e in ops:
        by_thread[(e.pid, e.tid)].append(e)
    for evs in by_thread.values():
        end = float("-inf")
        for e in sorted(evs, key=lambda e: (e.ts, -e.dur)):
            if e.ts >= end:
                out.append(e)
                end = e.end
    return out


def _fp32_evidence(kernels: list[Event], devices: list[dict[str, Any]]) -> dict[str, Any]:
    majors = [d.get("computeMajor") for d in devices if isinstance(d.get("computeMajor"), int)]
    by_name: dict[str, float] = defaultdict(float)
    for e in kernels:  # a few distinct names among many kernels: each name matched once
        by_name[e.name] += e.dur
    total = sum(by_name.values())
    fp32 = sum(d for name, d in by_name.items() if _FP32_GEMM.search(name) and not _LOW_PRECISION.search(name))
    return {"tensor_cores": (max(majors) >= 7) if majors else None, "compute_major": max(majors) if majors else None,
            "fp32_matmul_share": fp32 / total if total else 0.0}


def _mean(rows: list[Mapping[str, Any]], key: str) -> float | None:
    vals = [r[key] for r in rows if isinstance(r.get(key), (int, float)) and not isinstance(r.get(key), bool)]
    return sum(vals) / len(vals) if vals else None


def _nvml_evidence(rows: list[Mapping[str, Any]]) -> dict[str, Any]:
    alive = [r for r in rows if not r.get("lost")]
    capped = [r for r in alive if "sw_power_cap" in (r.get("throttle_reasons") or ())]
    return {"nvml_samples": len(alive), "power_cap_share": len(capped) / len(alive) if alive else None,
            "utilization_percent": _mean(alive, "utilization_gpu_percent"),
            "sm_active_percent": _mean(alive, "sm_active_percent"),
            "tensor_active_percent": _mean(alive, "tensor_active_percent")}


def _verdict(ev: dict[str, Any], b: dict[str, float]) -> tuple[str, str]:
    step_ms = ev["step_ms"]
    if b["data_wait"] >= INPUT_SHARE:
        return "input-bound", (
            f"The loop waits for its data {b['data_wait']:.0%} of each step ({b['data_wait'] * step_ms:.0f} ms of "
            f"{step_ms:.0f} ms): the input pipeline is the bottleneck; try more DataLoader workers (num_workers), "
            "pin_memory=True, prefetching (prefetch_factor) or a faster data format")
    if ev["syncs_per_step"] >= SYNC_PER_STEP and ev["gpu_idle_after_sync_share"] >= SYNC_IDLE_SHARE:
        where = ev["sync_op"] or "a synchronising call"
        if ev["sync_frame"]:
            where += f" ({ev['sync_frame']})"
        return "sync-bound", (
            f"Each step waits for the GPU {ev['syncs_per_step']:.3g} time{'s' if ev['syncs_per_step'] >= 2 else ''} in "
            f"{where}, then the GPU sits idle {ev['gpu_idle_after_sync_share']:.0%} of the step while the host "
            "catches up: log the tensor itself (mon.log(loss=loss) reads CUDA tensors off the loop) and read its "
            "value later, instead of .item(), .cpu() or printing it every step")
    if ev["copy_share"] >= COPY_SHARE:
        how = []
        if ev["pageable_copies"]:
            how.append("from pageable memory")
        if ev["copy_overlap_share"] is not None and ev["copy_overlap_share"] < 0.2:
            how.append("not overlapped with compute")
        return "copy-bound", (
            f"Host-device copies take {ev['copy_share']:.0%} of each step{' (' + ', '.join(how) + ')' if how else ''}: "
            "use DataLoader(pin_memory=True) and .to(device, non_blocking=True)")
    many_ops = ev["ops_per_step"] >= LAUNCH_OPS and (ev["op_mean_us"] or 0) <= LAUNCH_MEAN_US
    many_kernels = ev["kernels_per_step"] >= LAUNCH_OPS and (ev["kernel_mean_us"] or 0) <= LAUNCH_MEAN_US
    if (many_ops or many_kernels) and b["cpu_ops"] + b["idle"] >= LAUNCH_SHARE and b["gpu_kernels"] < LAUNCH_SHARE:
        count, mean = ((ev["ops_per_step"], ev["op_mean_us"]) if many_ops else (ev["kernels_per_step"], ev["kernel_mean_us"]))
        idle = "while the GPU idles between kernels" if ev["gpu_activity"] else "on the CPU"
        return "launch-bound", (
            f"Each step runs {count:,.0f} small ops ({mean:.0f} µs each on average) and dispatching them dominates "
            f"{idle}: try torch.compile, CUDA graphs, a bigger batch, or a fused optimizer (foreach=True, fused=True)")
    ta = ev["tensor_active_percent"]
    if ev["tensor_cores"] and ev["fp32_matmul_share"] >= FP32_SHARE and (ta is None or ta < TENSOR_LOW):
        seen = f", tensor activity {ta:.0f} %" if ta is not None else ""
        if ev["compute_major"] >= 8:  # Ampere on: bf16 and TF32
            how = ("use torch.autocast(device_type=\"cuda\", dtype=torch.bfloat16), or allow TF32 "
                   "(torch.backends.cuda.matmul.allow_tf32 = True)")
        else:  # Volta, Turing: tensor cores take fp16 only
            how = "use torch.autocast(device_type=\"cuda\", dtype=torch.float16) with a torch.amp.GradScaler"
        return "fp32-matmul", (
            f"{ev['fp32_matmul_share']:.0%} of the GPU's kernel time is fp32 matrix multiplies on a GPU with tensor "
            f"cores{seen}: they sit idle; {how}")
    if ev["gpu_activity"]:
        return "compute-bound", (
            f"The GPU runs kernels {b['gpu_kernels']:.0%} of each step and no input, sync, copy or launch overhead "
            "stands out: the step is compute-bound")
    return "compute-bound", (
        "The steps spend their time in the ops themselves and no input, sync or launch overhead stands out "
        "(no GPU activity was recorded: this loop computes on the CPU)")


def _nvml_note(ev: dict[str, Any]) -> str:
    """What NVML saw over the same steps, where it bears on the verdict: only when the trace has
    GPU work (a loop on the CPU is not slowed by the clocks of GPUs it does not use)."""
    if not ev.get("gpu_activity"):
        return ""
    notes = []
    cap = ev.get("power_cap_share")
    if cap is not None and cap >= POWER_CAP_NOTE:
        notes.append(f"the clocks were held by the power cap {cap:.0%} of the time")
    util, sm = ev.get("utilization_percent"), ev.get("sm_active_percent")
    if util is not None and sm is not None and util >= BUSY_NOTE and sm < SM_NOTE:
        notes.append(f"the GPU was busy {util:.0f} % but SM active {sm:.0f} %")
    return "; NVML saw that " + " and ".join(notes) if notes else ""


def _top_ops(host: list[Event], kernels: list[Event], windows: iv.Spans, n: int) -> list[dict[str, Any]]:
    """The ops with the most self time (their time less their child ops'), and the kernels."""
    self_us: dict[tuple[str, str], float] = defaultdict(float)
    counts: Counter = Counter()
    by_thread: dict[Any, list[Event]] = defaultdict(list)
    for e in host:
        if e.cat == "cpu_op" and not _marker(e) and _in(windows, e.ts):
            by_thread[(e.pid, e.tid)].append(e)
    for evs in by_thread.values():
        stack: list[list[Any]] = []  # [event, children's time]
        for e in sorted(evs, key=lambda e: (e.ts, -e.dur)):
            while stack and stack[-1][0].end <= e.ts:
                done = stack.pop()
                self_us[("cpu", done[0].name)] += max(0.0, done[0].dur - done[1])
            if stack:
                stack[-1][1] += e.dur
            stack.append([e, 0.0])
            counts[("cpu", e.name)] += 1
        for done in stack:
            self_us[("cpu", done[0].name)] += max(0.0, done[0].dur - done[1])
    for e in kernels:
        if _in(windows, e.ts):
            self_us[("gpu", e.name)] += e.dur
            counts[("gpu", e.name)] += 1
    top = sorted(self_us.items(), key=lambda kv: -kv[1])[:TOP_OPS]
    return [{"name": name, "kind": kind, "self_ms_per_step": us / n / 1000, "count_per_step": counts[(kind, name)] / n}
            for (kind, name), us in top]
