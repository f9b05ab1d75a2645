"""What keeps a very large machine's server responsive (benchmarks/big_machine.py measures it):
big JSON answers made in pieces that hand the GIL back, the process order made with C key
getters, and the start-up heap frozen out of full garbage collections once (checked in a real
process of its own: freezing is for the whole process)."""
from __future__ import annotations

import json
import subprocess
import sys
import textwrap

import pytest

from gpu_widgets.sampling.snapshot import by_memory
from gpu_widgets.service import json_pieces

SNAPSHOT = {
    "backend": "simulated", "status": "ok", "timestamp": 1.5, "cuda_visible_devices": None,
    "devices": [{"index": i, "name": "GPU \u00e9\u2028", "processes": [{"pid": 7, "used_memory_bytes": None}],
                 "unavailable": {"fan_percent": "no fan"}, "power_w": 12.25} for i in range(5)],
    "after": [1, None, "x"],
}


@pytest.mark.parametrize("obj,key,items", [
    (SNAPSHOT, "devices", SNAPSHOT["devices"]),
    ({"timestamp": None, "offset": 0}, "devices", []),  # the key last when the head lacks it
    ({"devices": None}, "devices", [[], {}, "", 0]),
])
def test_an_answer_made_in_pieces_is_exactly_what_json_dumps_gives(obj, key, items):
    assert json_pieces.object_with_list(obj, key, items) == json.dumps({**obj, key: list(items)}, allow_nan=False)


def test_pieces_refuse_what_json_refuses():
    with pytest.raises(ValueError):
        json_pieces.object_with_list({"a": 1}, "devices", [{"power_w": float("nan")}])
    with pytest.raises(ValueError):
        json_pieces.object_with_list({"a": float("inf")}, "devices", [])


def test_each_item_is_shaped_just_before_it_is_encoded_and_the_gil_is_handed_back(monkeypatch):
    events = []
    monkeypatch.setattr(json_pieces, "YIELD_EVERY_S", -1.0)  # hand it back after every item
    monkeypatch.setattr(json_pieces.time, "sleep", lambda s: events.append(("sleep", s)))
    text = json_pieces.object_with_list({"n": 3}, "rows", range(3), lambda i: events.append(("shape", i)) or {"i": i})
    assert json.loads(text) == {"n": 3, "rows": [{"i": 0}, {"i": 1}, {"i": 2}]}
    assert events == [("shape", 0), ("sleep", 0), ("shape", 1), ("sleep", 0), ("shape", 2), ("sleep", 0)]


def test_processes_are_ordered_by_memory_then_pid_unknown_memory_last_and_the_list_is_replaced():
    procs = [{"pid": 9, "used_memory_bytes": 5}, {"pid": 3, "used_memory_bytes": None}, {"pid": 4, "used_memory_bytes": 5},
             {"pid": 1}, {"pid": 2, "used_memory_bytes": 50}, {"pid": 8, "used_memory_bytes": 0}]
    original = list(procs)
    (part,) = by_memory([{"index": 0, "processes": procs}])
    assert [p["pid"] for p in part["processes"]] == [2, 4, 9, 8, 1, 3]
    assert procs == original and part["processes"] is not procs  # a backend may reuse its list
    (one,) = by_memory([{"index": 0, "processes": [{"pid": 5, "used_memory_bytes": None}]}])
    assert [p["pid"] for p in one["processes"]] == [5]


FREEZE = textwrap.dedent("""
    import gc, json, sys
    from gpu_widgets.service import gc_heap
    def snap(n):
        return {"devices": [{"processes": [{"pid": k} for k in range(n)]}, {"processes": None}, {}]}
    out = [gc_heap.freeze_once_big(snap(gc_heap.BIG_MACHINE_PROCESSES - 1)), gc.get_freeze_count()]
    out += [gc_heap.freeze_once_big(snap(gc_heap.BIG_MACHINE_PROCESSES)), gc.get_freeze_count() > 1000]
    out += [gc_heap.freeze_once_big(snap(5000))]  # once per process
    print(json.dumps(out))
""")


@pytest.mark.integration
def test_a_big_machine_freezes_the_heap_once_per_process_and_a_small_one_never():
    done = subprocess.run([sys.executable, "-c", FREEZE], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout) == [False, 0, True, True, False]


def test_the_server_freezes_only_when_told_and_is_told_by_default():
    from gpu_widgets.server.app import GpuWidgets
    from gpu_widgets.service.service import GpuService

    assert GpuWidgets.freeze_gc_on_big_machines.default_value is True
    assert GpuService().freeze_gc_on_big_machines is False  # a service made in Python (tests, tools) never does


async def test_an_answer_per_sample_is_made_once_for_those_asking_together_and_again_after_a_failure():
    import asyncio
    import threading

    from gpu_widgets.service.shared_answers import PerSample

    shared, calls, gate = PerSample(), [], threading.Event()

    def make(what: str) -> str:
        calls.append(what)
        gate.wait(10)
        if what == "bad":
            raise RuntimeError("broken")
        return what.upper()

    one, two = object(), object()
    waiting = [asyncio.ensure_future(shared.get(one, "k", make, "a")) for _ in range(5)]
    quitter = asyncio.ensure_future(shared.get(one, "k", make, "a"))
    await asyncio.sleep(0.05)
    quitter.cancel()  # a client that went away cancels nothing for the others
    gate.set()
    assert await asyncio.gather(*waiting) == ["A"] * 5 and calls == ["a"]
    assert await shared.get(one, "k", make, "a") == "A" and calls == ["a"]  # made: answered from it
    assert await shared.get(two, "k", make, "b") == "B" and calls == ["a", "b"]  # a new sample
    with pytest.raises(RuntimeError):
        await shared.get(two, "x", make, "bad")
    with pytest.raises(RuntimeError):
        await shared.get(two, "x", make, "bad")  # a failure is not kept: tried again
    assert calls == ["a", "b", "bad", "bad"] and shared.made == 4


def _hand_ticked(n_gpus: int):
    from gpu_widgets.backends import SimulatedBackend
    from gpu_widgets.service.service import GpuService

    service = GpuService(backend=SimulatedBackend(n_gpus=n_gpus, seed=1), interval_s=0.1, window_s=60.0)
    service.start_in_background()
    assert service.wait_ready(30)
    service.sampler.stop()  # ticked by hand from here on
    service.sampler.tick()
    return service


def _made_soon(service, snap, me, within_s: float = 10.0) -> bool:
    import time

    deadline = time.monotonic() + within_s
    while time.monotonic() < deadline:
        if service.latest_json_made(snap, me):
            return True
        time.sleep(0.01)
    return False


def test_while_someone_polls_a_big_machines_latest_answer_is_made_and_gzipped_as_the_sample_arrives():
    from gpu_widgets.service import service as service_module

    service = _hand_ticked(service_module.WARM_LATEST_GPUS + 1)
    try:
        service.sampler.tick()
        assert not _made_soon(service, service.latest(), None, within_s=0.3)  # nobody asked: no work
        service.latest_asked(None)  # a sidebar polls
        service.sampler.tick()
        snap = service.latest()
        assert _made_soon(service, snap, None)
        body, tail = service.latest_answer(snap, None)
        assert body.deflated  # the poll that comes finds the gzip made too
        doc = json.loads(body.raw + tail)
        assert len(doc["devices"]) == service_module.WARM_LATEST_GPUS + 1 and doc["status"] == "ok"
        assert body is service.latest_json(snap, None)  # made once, shared
    finally:
        service.stop()


def test_a_small_machines_latest_answer_is_made_only_when_asked():
    from gpu_widgets.service import service as service_module

    service = _hand_ticked(service_module.WARM_LATEST_GPUS)
    try:
        service.latest_asked(None)
        service.sampler.tick()
        assert not _made_soon(service, service.latest(), None, within_s=0.3)  # on the loop, when asked: cheap
    finally:
        service.stop()
