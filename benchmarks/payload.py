"""4. Payload: bytes a TrainingMonitor sends to the browser per redraw, against the number of
logged steps (10^2 ... 10^6), with 8 GPUs on the fake driver.

Every widget comm is replaced by a recording one (``comm.create_comm`` is meant to be replaced),
so each message is captured as the kernel would send it: its JSON content plus its binary
buffers (bqplot sends line data as binary arrays). A redraw is one call of the monitor's draw;
the messages sent during it are its payload, except the widgets it creates (``comm_open``: a
chart's figure, axes and marks, once, when its first line appears), reported apart. The loop logs 12 steps per simulated second and the
sampler ticks once per simulated second (a fake clock), so GPU curves grow with the run too.

    python -m benchmarks.payload --worker
"""
from __future__ import annotations

import argparse
import json
import threading
import time
from typing import Any, Callable

from .common import FakeDriver, Worker, WorkerError, serve

TARGET_BYTES = 32 * 1024
STEPS_PER_SECOND = 12  # a small model on a GPU: ~12 steps/s


class _Recorder:
    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.depth = 0
        self.current: list[tuple[str, int, int]] | None = None
        self.redraws: list[dict[str, Any]] = []
        self.outside = 0  # bytes sent while no redraw ran (widget creation)

    def message(self, msg_type: str, data: Any, buffers: Any) -> None:
        content = len(json.dumps(data, default=str, separators=(",", ":")))
        binary = sum(memoryview(b).nbytes for b in (buffers or ()))
        with self.lock:
            if self.current is not None:
                self.current.append((msg_type, content, binary))
            else:
                self.outside += content + binary


REC = _Recorder()


def _install_recording_comm() -> None:
    import comm
    from comm.base_comm import BaseComm

    class RecordingComm(BaseComm):
        def publish_msg(self, msg_type: str, data: Any = None, metadata: Any = None, buffers: Any = None,
                        **keys: Any) -> None:
            REC.message(msg_type, data, buffers)

    comm.create_comm = lambda *a, **kw: RecordingComm(*a, **kw)


class FakeClock:
    def __init__(self, t: float) -> None:
        self.t = t

    def monotonic(self) -> float:
        return self.t

    def wall(self) -> float:
        return self.t

    def wait(self, event: threading.Event, timeout: float) -> bool:
        return event.is_set()


def worker() -> None:
    _install_recording_comm()
    from gpu_widgets.monitor import run_state
    from gpu_widgets.monitor.monitor import TrainingMonitor
    from gpu_widgets.monitor.monitor_run import MonitorRun
    from gpu_widgets.backends.nvml import NvmlBackend
    from gpu_widgets.sampling.sampler import Sampler

    original_draw = MonitorRun.draw

    def recorded_draw(self: Any, n: int) -> None:
        with REC.lock:
            REC.current = []
        began = time.perf_counter()
        try:
            original_draw(self, n)
        finally:
            with REC.lock:
                msgs, REC.current = REC.current, None
            # Widgets a redraw creates (comm_open: a chart's figure, axes and marks when its first
            # line appears) are a one-time cost, counted apart from the redraw's updates.
            opens = [m for m in msgs if m[0] == "comm_open"]
            msgs = [m for m in msgs if m[0] != "comm_open"]
            REC.redraws.append({"steps": n, "messages": len(msgs), "content_bytes": sum(m[1] for m in msgs),
                                "binary_bytes": sum(m[2] for m in msgs),
                                "created_bytes": sum(m[1] + m[2] for m in opens),
                                "draw_ms": (time.perf_counter() - began) * 1e3})

    MonitorRun.draw = recorded_draw
    backend = NvmlBackend()
    backend.open()
    clock = FakeClock(time.time())
    sampler = Sampler(backend, interval_s=1.0, window_s=3600.0, clock=clock)
    sampler._read_slow()
    state: dict[str, Any] = {}

    run_state.now = lambda: clock.t  # logged rows carry the simulated time too

    def start() -> dict[str, Any]:
        # gpus="all": every GPU its own line, the costlier case (a process using no GPU would
        # draw 8 GPUs as one summary since issue 12).
        mon = TrainingMonitor("payload", run_log=False, display=False, sampler=sampler, gpus="all")
        state.update(mon=mon, logged=0)
        return {"created_bytes": REC.outside}

    def log_to(steps: int) -> dict[str, Any]:
        mon, logged = state["mon"], state["logged"]
        i = logged
        while i < steps:
            mon.log(i, loss=1.0 / (1 + i) + 0.01 * (i % 7), accuracy=min(1.0, i / 1e5), lr=3e-4)
            i += 1
            if i % STEPS_PER_SECOND == 0:
                clock.t += 1.0
                sampler.tick()
                if i % (STEPS_PER_SECOND * 600) == 0:
                    mon.parts.tick()  # the timer's work; the inbox holds an hour, so drain every 10 min
        state["logged"] = steps
        before = len(REC.redraws)
        # A full redraw (every line re-sent, GPU lines included), the largest a redraw can be; the
        # timer's redraws send only the lines that changed, so they are this size or smaller.
        mon.parts.charts.drawn_shares = None
        mon.refresh()
        last = REC.redraws[-1] if len(REC.redraws) > before else None
        marks = [m for c in mon.parts.view.charts.values() for m in c.lines.values()]
        points = sum(len(m.x) for m in marks)
        # What a redraw that re-sent every line would carry in binary: the bound on any redraw.
        # (A real redraw sends only the arrays that changed, so measured redraws vary below it.)
        held = sum(m.x.nbytes + m.y.nbytes for m in marks)
        return {
            "steps": steps,
            "gpu_samples": sampler.ticks,
            "redraw": last,
            "max_redraw_bytes_so_far": max((r["content_bytes"] + r["binary_bytes"] for r in REC.redraws), default=0),
            "redraws_so_far": len(REC.redraws),
            "points_in_marks": points,
            "bytes_held_by_marks": held,
            "lines": sum(len(c.lines) for c in mon.parts.view.charts.values()),
        }

    serve({"start": start, "log_to": log_to})


def measure(smoke: bool = False, log: Callable[[str], None] = print) -> dict[str, Any]:
    from .training import monitor_ready

    ready, why = monitor_ready()
    if not ready:
        return {"skipped": why}
    checkpoints = [100, 1_000] if smoke else [100, 1_000, 10_000, 100_000, 1_000_000]
    result: dict[str, Any] = {"steps_per_simulated_second": STEPS_PER_SECOND, "gpus": 8, "points": []}
    import sys

    with FakeDriver() as driver:
        w = Worker(sys.executable, "benchmarks.payload", ["--worker"], driver.env(), timeout=1200)
        try:
            result["created_bytes"] = w.call(op="start")["created_bytes"]
            for n in checkpoints:
                log(f"  payload: {n:,} steps")
                result["points"].append(w.call(op="log_to", steps=n))
        except WorkerError as exc:
            return {"skipped": f"the monitor failed in the payload benchmark: {exc}"}
        finally:
            w.close()
    sizes = [p["redraw"]["content_bytes"] + p["redraw"]["binary_bytes"] for p in result["points"] if p["redraw"]]
    worst = max([p["max_redraw_bytes_so_far"] for p in result["points"]], default=0)
    # Flat: once the lines hold their point budget (from 10^3 steps on), what a redraw can send no
    # longer grows with the run. Below that, a short run simply has fewer points to send.
    settled = [p["bytes_held_by_marks"] for p in result["points"] if p["steps"] >= 1_000]
    flat = bool(settled) and max(settled) <= 1.25 * min(settled)
    result["targets"] = [
        {"target": "payload per redraw <= 32 KB", "status": "met" if worst <= TARGET_BYTES else "MISSED",
         "value": worst, "limit": TARGET_BYTES, "measure": "largest redraw seen over the whole run"},
        {"target": "bytes held by the marks (any redraw's binary bound) <= 32 KB",
         "status": "met" if max(p["bytes_held_by_marks"] for p in result["points"]) <= TARGET_BYTES else "MISSED",
         "value": max(p["bytes_held_by_marks"] for p in result["points"]), "limit": TARGET_BYTES},
        {"target": "payload flat in the number of steps", "status": "met" if flat else "MISSED",
         "value": settled,
         "measure": "bytes held by the marks at each checkpoint from 10^3 steps on: max <= 1.25x min"},
    ]
    return result


def table(result: dict[str, Any]) -> list[str]:
    if "skipped" in result:
        return [f"skipped: {result['skipped']}"]
    lines = ["| steps logged | GPU samples (8 GPUs) | full redraw: messages | JSON bytes | binary bytes | total KB | "
             "largest redraw so far KB | points held by the marks | their bytes KB (a redraw's bound) | "
             "widgets created in the redraw KB (once) |",
             "| ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |"]
    for p in result["points"]:
        r = p["redraw"] or {"messages": 0, "content_bytes": 0, "binary_bytes": 0}
        lines.append(f"| {p['steps']:,} | {p['gpu_samples']:,} | {r['messages']} | {r['content_bytes']:,} | "
                     f"{r['binary_bytes']:,} | {(r['content_bytes'] + r['binary_bytes']) / 1024:,.1f} | "
                     f"{p['max_redraw_bytes_so_far'] / 1024:,.1f} | {p['points_in_marks']:,} | "
                     f"{p['bytes_held_by_marks'] / 1024:,.1f} | "
                     f"{r.get('created_bytes', 0) / 1024:,.1f} |")
    return lines


if __name__ == "__main__":
    parser = argparse.ArgumentParser()
    parser.add_argument("--worker", action="store_true")
    if parser.parse_args().worker:
        worker()
    else:
        print("\n".join(table(measure())))
