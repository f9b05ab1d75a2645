"""``cells/summary``: what one cell cost the GPU, through a real in-process Jupyter server and kernel
on the fake NVML (the kernel's child holds the memory, as a DataLoader worker or a ``!python`` job
would), with the token on."""
from __future__ import annotations

import asyncio
import json
import logging
import math
import subprocess
import time
from collections.abc import Callable
from typing import Any

import numpy as np
import pytest
from tornado.httpclient import HTTPClientError

from gpu_widgets.metrics.throttle import BITS
from gpu_widgets.server.cell_ledger import KernelLedger
from gpu_widgets.service.kernel_holdings import Entry
from gpu_widgets.service.cell_cost import summarize

from .api_schema import validate_response
from .kernel_children import kernel_with_child

PREFIX = ("gpu-widgets", "api", "v1")
GIB = 1 << 30
NVML_SERVER = {"backend": "nvml", "interval_s": 0.1, "slow_interval_s": 0.1}
IDLE = {"gpus": [{"util_gpu": 0}, {"util_gpu": 0}]}
THERMAL = BITS["sw_thermal_slowdown"]


async def summary(jp_fetch, kernel_id: str, start: float, end: float | None = None) -> dict[str, Any]:
    params = {"kernel_id": kernel_id, "start": repr(start)}
    if end is not None:
        params["end"] = repr(end)
    body = json.loads((await jp_fetch(*PREFIX, "cells", "summary", params=params)).body)
    validate_response("/cells/summary", body)
    return body


async def until(jp_fetch, kernel_id: str, start: float, ok: Callable[[dict[str, Any]], bool]) -> dict[str, Any]:
    """The running cell's summary, asked again until ``ok`` holds (the ledger books each slow sample)."""
    deadline = time.monotonic() + 20
    while True:
        body = await summary(jp_fetch, kernel_id, start)
        if ok(body):
            return body
        assert time.monotonic() < deadline, body
        await asyncio.sleep(0.1)


def gpu0(body: dict[str, Any]) -> dict[str, Any] | None:
    return next((g for g in body["gpus"] if g["index"] == 0), None)


@pytest.mark.parametrize("gw_config,fake_nvml_config", [(NVML_SERVER, IDLE)])
async def test_a_cell_whose_kernel_child_holds_memory_gets_its_gpu_peak_change_busy_and_energy(
        in_process_fake_nvml, jp_fetch, jp_serverapp, tmp_path):
    _, kernel_id, child = await kernel_with_child(jp_fetch, jp_serverapp, tmp_path)
    stranger = subprocess.Popen(["sleep", "300"])  # this test's process, not the kernel's
    try:
        # Given a CPU-only cell: a few samples with nothing of the kernel's on a GPU
        cpu_start = time.time()
        await asyncio.sleep(0.6)
        cpu = await summary(jp_fetch, kernel_id, cpu_start, time.time())
        # Then it used no GPU: no line
        assert cpu["gpus"] == [] and cpu["running"] is False and cpu["restarted"] is False

        # When a cell starts and the kernel's child takes 2 GiB on GPU 0 at 80 %
        start = time.time()
        await asyncio.sleep(0.3)
        in_process_fake_nvml({"gpus": [{"util_gpu": 80, "energy_mj": 1_000_000, "procs": [(child, 2 * GIB)]},
                                       {"util_gpu": 50}]})
        running = await until(jp_fetch, kernel_id, start, lambda b: (gpu0(b) or {}).get("peak_memory_bytes") == 2 * GIB)
        # Then the running cell's summary says so, GPU 0 only (GPU 1 is busy, but not with the kernel)
        assert running["running"] is True and [g["index"] for g in running["gpus"]] == [0]
        assert running["end"] >= running["start"] == start

        # When it grows to 3 GiB beside another process, the GPU heats into a thermal slowdown
        in_process_fake_nvml({"gpus": [{"util_gpu": 90, "energy_mj": 1_600_000, "clocks_event_reasons": THERMAL,
                                        "procs": [(child, 3 * GIB), (stranger.pid, GIB)]}, {"util_gpu": 50}]})
        await until(jp_fetch, kernel_id, start, lambda b: gpu0(b)["peak_memory_bytes"] == 3 * GIB
                    and gpu0(b)["shared_with"] == 1)
        # and ends the cell holding 2.5 GiB, alone again
        in_process_fake_nvml({"gpus": [{"util_gpu": 90, "energy_mj": 1_600_000, "procs": [(child, 5 * GIB // 2)]},
                                       {"util_gpu": 50}]})
        await until(jp_fetch, kernel_id, start, lambda b: gpu0(b)["memory_change_bytes"] == 5 * GIB // 2)
        end = time.time()
        done = await summary(jp_fetch, kernel_id, start, end)
        # final once a sample after the end is booked: asking again gives the same figures
        while not done["final"]:
            await asyncio.sleep(0.1)
            done = await summary(jp_fetch, kernel_id, start, end)
        assert {k: v for k, v in (await summary(jp_fetch, kernel_id, start, end)).items() if k != "server_time"} == \
            {k: v for k, v in done.items() if k != "server_time"}
        assert running["final"] is False
    finally:
        stranger.kill()
        stranger.wait()
    # Then its line: GPU 0, the cell's duration, the peak and the change from start to end
    assert done["running"] is False and done["duration_s"] == pytest.approx(end - start, abs=0.01)
    g = gpu0(done)
    assert [x["index"] for x in done["gpus"]] == [0]
    assert g["uuid"] == "GPU-00000000-0000-0000-0000-000000000000" and g["name"] == "NVIDIA H100 80GB HBM3"
    assert g["peak_memory_bytes"] == 3 * GIB and g["memory_change_bytes"] == 5 * GIB // 2
    assert g["memory_unknown"] is False
    # the GPU's own figures over the cell: shared with one process, idle at the start, 80-90 % after
    assert g["shared_with"] == 1
    assert 0 < g["busy_percent"] < 90 and g["samples"] >= 5
    # busy is the mean of the samples /samples gives for the cell's time (and the one just before)
    history = json.loads((await jp_fetch(*PREFIX, "samples", params={"since": repr(start - 0.1)})).body)
    utils = [u for t, u in zip(history["timestamps"], history["devices"][0]["utilization_gpu_percent"]) if t <= end]
    assert g["busy_percent"] == pytest.approx(sum(utils) / len(utils), abs=0.051) and g["samples"] == len(utils)
    assert g["energy_j"] == pytest.approx(600.0)
    assert g["slowdowns"] == ["sw_thermal_slowdown"] and g["lost"] is False
    assert done["partial"] is False and done["history_from"] is None
    # The other process is a count: never named, nor its pid
    assert str(stranger.pid) not in json.dumps(done)

    # A cell later, where the kernel keeps its 2.5 GiB and the GPU works on: it used GPU 0
    later = time.time()
    await asyncio.sleep(0.4)
    busy = await summary(jp_fetch, kernel_id, later, time.time())
    assert gpu0(busy)["peak_memory_bytes"] == 5 * GIB // 2 and gpu0(busy)["memory_change_bytes"] == 0
    # And when the GPU idles, a CPU-only cell: the memory kept is no use of the GPU, no line
    in_process_fake_nvml({"gpus": [{"util_gpu": 0, "procs": [(child, 5 * GIB // 2)]}, {"util_gpu": 50}]})
    deadline = time.monotonic() + 20
    while (await summary(jp_fetch, kernel_id, time.time() - 0.3))["held_only"] != [0]:  # the busy samples passed
        assert time.monotonic() < deadline
        await asyncio.sleep(0.1)
    quiet = time.time()
    await asyncio.sleep(0.4)
    idle = await summary(jp_fetch, kernel_id, quiet, time.time())
    assert idle["gpus"] == [] and idle["held_only"] == [0]

    # When the kernel restarts during a cell: the summary says so, and when
    before = time.time()
    await jp_fetch("api", "kernels", kernel_id, "restart", method="POST", body="")
    restarted = await until(jp_fetch, kernel_id, before, lambda b: b["restarted"])
    assert len(restarted["restarted_at"]) == 1 and before <= restarted["restarted_at"][0] <= time.time()


@pytest.mark.parametrize("gw_config,fake_nvml_config", [(NVML_SERVER, IDLE)])
async def test_a_lost_gpu_during_the_cell_is_said_instead_of_figures(in_process_fake_nvml, jp_fetch, jp_serverapp,
                                                                     tmp_path):
    _, kernel_id, child = await kernel_with_child(jp_fetch, jp_serverapp, tmp_path)
    start = time.time()
    in_process_fake_nvml({"gpus": [{"util_gpu": 70, "procs": [(child, GIB)]}, {}]})
    await until(jp_fetch, kernel_id, start, lambda b: bool(b["gpus"]))
    # When GPU 0 stops answering (every call: "GPU is lost")
    in_process_fake_nvml({"gpus": [{"util_gpu": 70, "procs": [(child, GIB)], "error": {"*": 15}}, {}]})
    done = await until(jp_fetch, kernel_id, start, lambda b: gpu0(b)["lost"])
    assert gpu0(done)["peak_memory_bytes"] == GIB


@pytest.mark.parametrize(
    "params,status,words",
    [
        ({}, 400, "kernel_id: expected a kernel id"),
        ({"kernel_id": "k"}, 400, "start: required"),
        ({"kernel_id": "k", "start": "noon"}, 400, "start: expected unix seconds (a number), got 'noon'"),
        ({"kernel_id": "k", "start": "1e400"}, 400, "start: expected unix seconds >= 0"),
        ({"kernel_id": "k", "start": "-1"}, 400, "start: expected unix seconds >= 0"),
        ({"kernel_id": "k", "start": "nan"}, 400, "start: expected unix seconds >= 0"),
        ({"kernel_id": "k", "start": "1"}, 400, "more than 31 days"),
        ({"kernel_id": "../../etc", "start": "1"}, 400, "kernel_id: expected a kernel id"),
        ({"kernel_id": "k" * 65, "start": "1"}, 400, "kernel_id: expected at most 64 characters"),
        ({"kernel_id": "k", "start": "1", "cell": "3"}, 400,
         "cell: unknown parameter (valid: kernel_id, start, end, next_start)"),
    ],
)
async def test_bad_cell_queries_are_400_naming_the_parameter(jp_fetch, params, status, words):
    with pytest.raises(HTTPClientError) as info:
        await jp_fetch(*PREFIX, "cells", "summary", params=params)
    assert info.value.code == status
    body = json.loads(info.value.response.body)
    validate_response("error", body)
    assert body["code"] == "bad_parameter" and words in body["message"], body


async def test_times_in_the_future_or_backwards_and_unknown_kernels_are_4xx(jp_fetch, jp_serverapp):
    reply = await jp_fetch("api", "kernels", method="POST", body=json.dumps({"name": "python3"}))
    kernel_id = json.loads(reply.body)["id"]
    now = time.time()
    cases = [
        ({"start": now + 3600}, 400, "start: ", "in the future"),
        ({"start": now - 10, "end": now + 3600}, 400, "end: ", "in the future"),
        ({"start": now - 10, "end": now - 20}, 400, "end: ", "before the start"),
        ({"start": now - 10, "end": now - 5, "next_start": now - 6}, 400, "next_start: ", "after this one's end"),
        ({"start": now - 10, "next_start": now - 6}, 400, "next_start: ", "needs end"),
        ({"start": now - 10, "end": now - 5, "next_start": now + 3600}, 400, "next_start: ", "in the future"),
    ]
    for extra, status, name, words in cases:
        with pytest.raises(HTTPClientError) as info:
            await jp_fetch(*PREFIX, "cells", "summary", params={"kernel_id": kernel_id, **{k: repr(v) for k, v in extra.items()}})
        body = json.loads(info.value.response.body)
        assert info.value.code == status and body["message"].startswith(name) and words in body["message"], body
    # A kernel this server never ran (another user's, another server's): 404, nothing about it
    for unknown in ("0b3c9d1e-0000-4000-8000-000000000000", "someone-elses-kernel"):
        with pytest.raises(HTTPClientError) as info:
            await jp_fetch(*PREFIX, "cells", "summary", params={"kernel_id": unknown, "start": repr(now - 5)})
        body = json.loads(info.value.response.body)
        assert info.value.code == 404 and body["code"] == "unknown_kernel" and unknown in body["message"]
    # No token: 403, like every route
    with pytest.raises(HTTPClientError) as info:
        await jp_fetch(*PREFIX, "cells", "summary", params={"kernel_id": kernel_id, "start": repr(now - 5)},
                       headers={"Authorization": ""})
    assert info.value.code == 403
    # The kernel itself, running and never on a GPU: an empty summary, not an error
    body = await summary(jp_fetch, kernel_id, now - 5)
    assert body["gpus"] == [] and body["running"] is True and body["kernel_id"] == kernel_id


# -- the ledger and the summary without a server (made-up figures) ---------------------------------

class _Service:
    ready = False


def test_the_ledger_keeps_changes_only_and_forgets_what_fell_out_of_the_window():
    ledger = KernelLedger(_Service(), {}, logging.getLogger("t"), 1.0, window_s=100.0)
    # A kernel never on a GPU books nothing
    ledger.add(0.0, {}, {}, {"a": 10})
    assert len(ledger.books["a"].entries) == 0 and ledger.known("a")
    # The same holding sample after sample is one entry; a change is another
    for t in range(1, 50):
        ledger.add(float(t), {"a": {0: GIB}}, {"a": {0: 0}}, {"a": 10})
    ledger.add(50.0, {"a": {0: 2 * GIB}}, {"a": {0: 0}}, {"a": 10})
    assert [e.t for e in ledger.books["a"].entries] == [1.0, 50.0]
    # 200 s later: the entry in effect at the window's start stays, older ones go
    for t in range(51, 250):
        ledger.add(float(t), {"a": {0: GIB if t % 2 else 2 * GIB}}, {"a": {0: 0}}, {"a": 10})
    entries = ledger.books["a"].entries
    assert entries[0].t < 249 - 100 <= entries[1].t
    # between(): the entry in effect at the start, then those inside
    got, restarts, after = ledger.between("a", 200.5, 203.0)
    assert [e.t for e in got] == [200.0, 201.0, 202.0, 203.0] and restarts == []
    # and the first booked after the end, within a round and a half: what the cell left behind
    assert after.t == 204.0 and ledger.between("a", 200.5, 249.5)[2] is None
    # read after the next cell began: maybe that cell's, so not this one's end
    assert ledger.between("a", 200.5, 203.0, next_start=203.5)[2] is None
    # A new root pid is a restart
    ledger.add(250.0, {}, {}, {"a": 11})
    assert ledger.between("a", 240.0, 260.0)[1] == [250.0]
    assert not ledger.known("b") and ledger.between("b", 0, 1) == ([], [], None)


class _History:
    """A History's stats_between() for GPU 0 at ``util`` % over 1 s samples, energy rising 100 J a
    sample (the store's own tests cover stats_between() on real samples)."""

    def __init__(self, util: float) -> None:
        self.util = util

    def stats_between(self, t0, t1, indices=None, lookback_s=0.0):
        n = len(np.arange(max(math.ceil(t0 - lookback_s), 0.0), t1 + 1e-9, 1.0))
        return n, {0: {"uuid": "GPU-0", "name": "H100", "util_mean": self.util, "util_max": self.util,
                       "sm_mean": float("nan"), "energy_first": 0.0, "energy_last": 100.0 * (n - 1),
                       "throttle_mask": 0, "lost": False}}, 0.0


def test_memory_unknown_in_a_container_is_said_and_not_guessed():
    entries = [Entry(0.0, {0: None}, {0: 2}), Entry(5.0, {0: None}, {0: 3})]
    out = summarize(entries, [], _History(60.0), 1.0, 9.0, False, 1.0)
    (g,) = out["gpus"]
    assert g["memory_unknown"] is True and g["peak_memory_bytes"] is None and g["memory_change_bytes"] is None
    assert g["shared_with"] == 3 and g["busy_percent"] == 60.0 and g["samples"] == 10 and g["energy_j"] == 900.0
    # Unknown memory on an idle GPU (or with no samples): nothing says the cell used it
    for history in (_History(0.0), None):
        idle = summarize(entries, [], history, 1.0, 9.0, False, 1.0)
        assert idle["gpus"] == [] and idle["held_only"] == [0]


def test_a_gpu_only_kept_memory_on_while_idle_is_no_use_of_it():
    # A CPU-only cell after a model was loaded: the memory stays, the GPU idles
    kept = [Entry(0.0, {0: 4 * GIB}, {0: 0})]
    out = summarize(kept, [], _History(0.0), 10.0, 20.0, False, 1.0)
    assert out["gpus"] == [] and out["held_only"] == [0]
    # The same while the GPU works (a training step on the loaded model): used
    assert [g["index"] for g in summarize(kept, [], _History(40.0), 10.0, 20.0, False, 1.0)["gpus"]] == [0]
    # Memory that changed, on an idle GPU (a model loaded, nothing run yet): used
    loaded = kept + [Entry(15.0, {0: 6 * GIB}, {0: 0})]
    assert summarize(loaded, [], _History(0.0), 10.0, 20.0, False, 1.0)["gpus"][0]["memory_change_bytes"] == 2 * GIB
    # The start's state is the entry in effect before the cell; a cell that freed memory shows -
    freed = summarize([Entry(0.0, {0: 4 * GIB}, {}), Entry(5.0, {0: GIB}, {})], [], None, 1.0, 9.0, False, 1.0)
    assert freed["gpus"][0]["memory_change_bytes"] == -3 * GIB and freed["gpus"][0]["peak_memory_bytes"] == 4 * GIB
