"""Synthetic torch.profiler traces for the profile analysis (issue 26): the Chrome-trace JSON that
Kineto writes, built event by event, so that the CUDA verdicts are tested without a GPU.

What the format was checked against:
- a trace the CPU profiler writes here (torch 2.13, ``torch.profiler.profile(activities=[CPU],
  with_stack=True, schedule=schedule(wait=0, warmup=1, active=3))`` + ``export_chrome_trace``):
  the top-level keys (schemaVersion, deviceProperties, trace_id, with_stack, host_name,
  displayTimeUnit "ms", baseTimeNanoseconds, traceEvents, traceName, in that order); ``ProfilerStep#N`` and
  ``enumerate(DataLoader)#_SingleProcessDataLoaderIter.__next__`` as ``user_annotation``; ops as
  ``cpu_op`` with args "External id", "Record function id", "Sequence number", "Ev Idx"; frames as
  ``python_function`` named "file.py(line): function" (the file relative to its sys.path entry:
  "torch/profiler/profiler.py(1227): step", "<built-in method ...>") with "Python id" and
  "Python parent id"; the "Trace" span on pid "Spans"; process/thread metadata (``ph`` "M"); the
  "fwdbwd" flows (``ph`` "s"/"f"); timestamps in µs with three decimals. tests/
  test_profile_analysis.py::test_builder_matches_a_real_cpu_trace keeps this true.
- Kineto's writer (pytorch/kineto libkineto/src/output_json.cpp, CuptiActivity.cpp,
  CudaDeviceProperties.cpp, VersionLogger.cpp): GPU activities as ``"ph": "X"`` with pid = the
  device and tid = the stream; ``kernel`` args "External id" (the launching op's), "queued",
  "device", "context", "stream", "correlation", "registers per thread", "shared memory", "blocks
  per SM", "warps per SM", "grid", "block", "est. achieved occupancy %"; ``gpu_memcpy`` named
  "Memcpy HtoD (Pageable -> Device)" with "device", "context", "stream", "correlation", "bytes",
  "memory bandwidth (GB/s)"; ``gpu_memset`` "Memset (Device)"; ``cuda_runtime`` args "cbid",
  "correlation" (cbids from CUPTI's cupti_runtime_cbid.h: cudaMemcpyAsync 41, cudaMemsetAsync 51,
  cudaStreamSynchronize 131, cudaLaunchKernel 211); ``ac2g`` flows from the runtime call ("s") to
  its GPU activity ("f", "bp": "e"), id = the correlation; ``gpu_user_annotation`` copies of the
  ProfilerStep spans on the GPU's timeline; deviceProperties "id", "name", "totalGlobalMem",
  "computeMajor", "computeMinor", "maxThreadsPerBlock", "maxThreadsPerMultiprocessor",
  "regsPerBlock", "warpSize", "sharedMemPerBlock", "numSms", "regsPerMultiprocessor",
  "sharedMemPerBlockOptin", "sharedMemPerMultiprocessor"; the cupti_version,
  cuda_runtime_version and cuda_driver_version keys.

The GPU side is a small simulation: each stream runs its work in order, a kernel starts when it
was launched (plus a launch latency) or when the stream's previous work ends, whichever is later,
and ``sync()`` waits until the stream is idle; so a scenario only says what the host does.
"""
from __future__ import annotations

import gzip
import json
from pathlib import Path
from typing import Any

LAUNCH_LATENCY_US = 5.0
CBID = {"cudaMemcpyAsync": 41, "cudaMemsetAsync": 51, "cudaStreamSynchronize": 131, "cudaLaunchKernel": 211}
A100 = {"name": "NVIDIA A100-SXM4-80GB", "computeMajor": 8, "computeMinor": 0, "numSms": 108,
        "totalGlobalMem": 85_031_714_816}
P100 = {"name": "Tesla P100-PCIE-16GB", "computeMajor": 6, "computeMinor": 0, "numSms": 56,
        "totalGlobalMem": 17_071_734_784}
LOADER = "enumerate(DataLoader)#_SingleProcessDataLoaderIter.__next__"


def _us(t: float) -> float:
    return float(round(t, 3))  # Kineto writes "ts": 123.456 (whole ns)


class KinetoTrace:
    """One process's trace: host events on (pid, tid), GPU work on device 0's streams."""

    def __init__(self, *, devices: tuple[dict[str, Any], ...] = (A100,), cuda: bool = True,
                 pid: int = 41235, tid: int = 41235, t0: float = 5_562_403_685_000.0):
        self.devices, self.cuda, self.pid, self.tid, self.t0 = devices, cuda, pid, tid, t0
        self.events: list[dict[str, Any]] = []
        self.stream_free: dict[int, float] = {}
        self._ext = self._corr = self._py = self._idx = 0
        self._steps: list[tuple[int, float, float]] = []

    # -- host events ------------------------------------------------------------------------
    def _x(self, cat: str, name: str, ts: float, dur: float, args: dict[str, Any], pid: Any = None,
           tid: Any = None) -> dict[str, Any]:
        e = {"ph": "X", "cat": cat, "name": name, "pid": self.pid if pid is None else pid,
             "tid": self.tid if tid is None else tid, "ts": _us(self.t0 + ts), "dur": _us(dur), "args": args}
        self.events.append(e)
        return e

    def op(self, name: str, ts: float, dur: float, *, seq: int | None = None) -> int:
        """A ``cpu_op`` (an aten op); its External id, for the runtime calls it makes."""
        self._ext += 1
        args: dict[str, Any] = {"External id": self._ext, "Record function id": 0}
        if seq is not None:
            args.update({"Sequence number": seq, "Fwd thread id": 0})
        args["Ev Idx"] = self._next_idx()
        self._x("cpu_op", name, ts, dur, args)
        return self._ext

    def annotation(self, name: str, ts: float, dur: float) -> int:
        self._ext += 1
        self._x("user_annotation", name, ts, dur, {"External id": self._ext, "Record function id": 0,
                                                   "Ev Idx": self._next_idx()})
        return self._ext

    def py(self, name: str, ts: float, dur: float, parent: int | None = None) -> int:
        """A ``python_function`` frame, e.g. "train.py(52): train_step"; its Python id."""
        self._py += 1
        self._x("python_function", name, ts, dur, {"Python parent id": parent, "Python id": self._py,
                                                   "Ev Idx": self._next_idx()})
        return self._py

    def close(self, *, ext: int | None = None, python_id: int | None = None, end: float) -> None:
        """Set the end of an op (by External id) or a frame (by Python id) opened before its
        children were known."""
        for e in reversed(self.events):
            args = e.get("args", {})
            if (ext is not None and e["cat"] in ("cpu_op", "user_annotation") and args.get("External id") == ext) or (
                    python_id is not None and e["cat"] == "python_function" and args.get("Python id") == python_id):
                e["dur"] = _us(self.t0 + end - e["ts"])
                return
        raise KeyError(ext if ext is not None else python_id)

    def step(self, n: int, ts: float, dur: float) -> None:
        """``ProfilerStep#n`` (what ``prof.step()`` records); its GPU-side copy is added by ``doc()``."""
        self.annotation(f"ProfilerStep#{n}", ts, dur)
        self._steps.append((n, ts, dur))

    def loader(self, ts: float, dur: float) -> None:
        """The DataLoader's ``__next__`` span, with the frames torch.profiler records under it."""
        self.annotation(LOADER, ts, dur)
        self.py("torch/utils/data/dataloader.py(720): __next__", ts + 1, max(0.0, dur - 2))

    # -- the CUDA runtime and the GPU -------------------------------------------------------
    def _runtime(self, name: str, ts: float, dur: float, ext: int | None) -> int:
        self._corr += 1
        args: dict[str, Any] = {"External id": ext} if ext is not None else {}
        args.update({"cbid": CBID[name], "correlation": self._corr})
        self._x("cuda_runtime", name, ts, dur, args)
        return self._corr

    def _gpu(self, cat: str, name: str, ts: float, gpu_us: float, stream: int, corr: int, ext: int | None,
             args: dict[str, Any], host_ts: float) -> float:
        start = max(ts + LAUNCH_LATENCY_US, self.stream_free.get(stream, 0.0))
        self.stream_free[stream] = start + gpu_us
        full: dict[str, Any] = {"External id": ext} if ext is not None else {}
        if cat == "kernel":
            full.update({"queued": 0, "device": 0, "context": 1, "stream": stream, "correlation": corr, **args})
        else:
            full.update({"device": 0, "context": 1, "stream": stream, "correlation": corr, **args})
        self._x(cat, name, start, gpu_us, full, pid=0, tid=stream)
        self.events.append({"ph": "s", "id": corr, "pid": self.pid, "tid": self.tid, "ts": _us(self.t0 + host_ts),
                            "cat": "ac2g", "name": "ac2g"})
        self.events.append({"ph": "f", "id": corr, "pid": 0, "tid": stream, "ts": _us(self.t0 + start),
                            "cat": "ac2g", "name": "ac2g", "bp": "e"})
        return start + gpu_us

    def launch(self, ts: float, kernel: str, gpu_us: float, *, ext: int | None = None, stream: int = 7,
               runtime_us: float = 4.0, grid: tuple[int, int, int] = (1024, 1, 1),
               block: tuple[int, int, int] = (128, 1, 1)) -> float:
        """``cudaLaunchKernel`` at ``ts`` and its kernel, queued on ``stream``; the host's time after."""
        corr = self._runtime("cudaLaunchKernel", ts, runtime_us, ext)
        self._gpu("kernel", kernel, ts, gpu_us, stream, corr, ext,
                  {"registers per thread": 32, "shared memory": 0, "blocks per SM": 9.48,
                   "warps per SM": 37.9, "grid": list(grid), "block": list(block), "est. achieved occupancy %": 59},
                  ts)
        return ts + runtime_us

    def memcpy(self, ts: float, kind: str, nbytes: int, gpu_us: float, *, ext: int | None = None,
               pinned: bool = False, blocking: bool | None = None, stream: int = 7) -> float:
        """``cudaMemcpyAsync`` and its copy ("HtoD" or "DtoH"); a pageable copy holds the host until
        it is done (the driver stages it: ``blocking``), a pinned one returns at once. The host's
        time after."""
        host = "Pinned" if pinned else "Pageable"
        name = f"Memcpy {kind} ({host} -> Device)" if kind == "HtoD" else f"Memcpy {kind} (Device -> {host})"
        self._corr += 1
        corr = self._corr
        end = self._gpu("gpu_memcpy", name, ts, gpu_us, stream, corr, ext,
                        {"bytes": nbytes, "memory bandwidth (GB/s)": nbytes / (gpu_us * 1000)}, ts)
        self._corr -= 1  # the runtime call takes the same correlation
        host_end = end + 3.0 if (not pinned if blocking is None else blocking) else ts + 6.0
        self._runtime("cudaMemcpyAsync", ts, host_end - ts, ext)
        return host_end

    def memset(self, ts: float, nbytes: int, gpu_us: float, *, ext: int | None = None, stream: int = 7) -> float:
        self._corr += 1
        corr = self._corr
        self._gpu("gpu_memset", "Memset (Device)", ts, gpu_us, stream, corr, ext,
                  {"bytes": nbytes, "memory bandwidth (GB/s)": nbytes / (gpu_us * 1000)}, ts)
        self._corr -= 1
        self._runtime("cudaMemsetAsync", ts, 4.0, ext)
        return ts + 4.0

    def sync(self, ts: float, *, ext: int | None = None, stream: int = 7) -> float:
        """``cudaStreamSynchronize``: the host waits until the stream is idle; the host's time after."""
        end = max(ts + 2.0, self.stream_free.get(stream, 0.0) + 2.0)
        self._runtime("cudaStreamSynchronize", ts, end - ts, ext)
        return end

    def item(self, ts: float, *, runtime_sync: bool = True, stream: int = 7) -> float:
        """``tensor.item()`` on a CUDA tensor: aten::item > aten::_local_scalar_dense > a D2H copy
        of 4 bytes and (``runtime_sync``) the stream sync that waits for it. The host's time after."""
        item_ext, dense_ext = self._ext + 1, self._ext + 2
        self._ext += 2
        t = self.memcpy(ts + 4.0, "DtoH", 4, 2.0, ext=dense_ext, blocking=False, stream=stream)
        if runtime_sync:
            t = self.sync(t, ext=dense_ext, stream=stream)
        else:  # the host waits all the same, inside the op
            t = max(t, self.stream_free.get(stream, 0.0) + 1.0)
        for name, ext, a, b in (("aten::item", item_ext, ts, t + 3.0), ("aten::_local_scalar_dense", dense_ext,
                                                                         ts + 2.0, t + 1.0)):
            self._x("cpu_op", name, a, b - a, {"External id": ext, "Record function id": 0, "Ev Idx": self._next_idx()})
        return t + 3.0

    def _next_idx(self) -> int:
        self._idx += 1
        return self._idx - 1

    # -- the document -----------------------------------------------------------------------
    def doc(self) -> dict[str, Any]:
        gpu = [e for e in self.events if e["ph"] == "X" and e["pid"] == 0]
        events = list(self.events)
        for n, ts, dur in self._steps:  # the step's span on the GPU's timeline: its GPU work
            a, b = self.t0 + ts, self.t0 + ts + dur
            inside = [e for e in gpu if a <= e["ts"] < b]
            if inside:
                lo, hi = min(e["ts"] for e in inside), max(e["ts"] + e["dur"] for e in inside)
                events.append({"ph": "X", "cat": "gpu_user_annotation", "name": f"ProfilerStep#{n}", "pid": 0,
                               "tid": inside[0]["tid"], "ts": _us(lo - 0.001), "dur": _us(hi - lo + 0.002),
                               "args": {"External id": 0}})
        hosts = [e for e in self.events if e["ph"] == "X"]
        start = min((e["ts"] for e in hosts), default=self.t0)
        end = max((e["ts"] + e["dur"] for e in hosts), default=self.t0)
        meta = [{"ph": "M", "name": "process_name", "ts": start, "pid": self.pid, "tid": 0, "args": {"name": "python"}},
                {"ph": "M", "name": "process_labels", "ts": start, "pid": self.pid, "tid": 0, "args": {"labels": "CPU"}},
                {"ph": "M", "name": "thread_name", "ts": start, "pid": self.pid, "tid": self.tid,
                 "args": {"name": f"thread {self.tid} (python)"}}]
        if self.cuda:
            meta += [{"ph": "M", "name": "process_name", "ts": start, "pid": 0, "tid": 0, "args": {"name": "python"}},
                     {"ph": "M", "name": "process_labels", "ts": start, "pid": 0, "tid": 0, "args": {"labels": "GPU 0"}}]
            meta += [{"ph": "M", "name": "thread_name", "ts": start, "pid": 0, "tid": s, "args": {"name": f"stream {s}"}}
                     for s in sorted(self.stream_free)]
        events = meta + events + [
            {"ph": "X", "cat": "Trace", "name": "PyTorch Profiler (0)", "pid": "Spans", "tid": "PyTorch Profiler",
             "ts": start, "dur": _us(end - start), "args": {"Op count": 0}},
            {"ph": "i", "s": "g", "name": "Iteration Start: PyTorch Profiler", "pid": "Traces",
             "tid": "Trace PyTorch Profiler", "ts": start},
            {"ph": "i", "s": "g", "name": "Record Window End", "pid": "", "tid": "", "ts": end}]
        doc: dict[str, Any] = {"schemaVersion": 1, "deviceProperties": [self._device(i, d) for i, d in
                                                                        enumerate(self.devices)] if self.cuda else []}
        if self.cuda:
            doc.update({"cupti_version": 24, "cuda_runtime_version": 12080, "cuda_driver_version": 12080})
        doc.update({"trace_id": "5B6C2D7E8F9A4B3C9D1E2F3A4B5C6D7E", "with_stack": 1, "host_name": "node",
                    "displayTimeUnit": "ms", "baseTimeNanoseconds": 1_790_857_026_000_000_000,
                    "traceEvents": events, "traceName": "synthetic.pt.trace.json"})  # the order torch 2.13 exports
        return doc

    @staticmethod
    def _device(i: int, d: dict[str, Any]) -> dict[str, Any]:
        return {"id": i, "name": d["name"], "totalGlobalMem": d["totalGlobalMem"], "computeMajor": d["computeMajor"],
                "computeMinor": d["computeMinor"], "maxThreadsPerBlock": 1024, "maxThreadsPerMultiprocessor": 2048,
                "regsPerBlock": 65536, "warpSize": 32, "sharedMemPerBlock": 49152, "numSms": d["numSms"],
                "regsPerMultiprocessor": 65536, "sharedMemPerBlockOptin": 166912, "sharedMemPerMultiprocessor": 167936}

    def write(self, path: str | Path, *, gz: bool = False) -> Path:
        path = Path(path)
        data = json.dumps(self.doc()).encode()
        path.write_bytes(gzip.compress(data) if gz else data)
        return path
