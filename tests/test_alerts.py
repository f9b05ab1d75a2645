"""Alerts decided on the server: the rules on made-up snapshots (each fires once per episode, ends,
does not flap, memory stays bounded), then through real HTTP with auth on: scripted faults of the
simulated backend, a real kernel holding memory on an idle (fake-driver) GPU, and the NVML calls
counted on the fake driver with the alerts on and off."""
from __future__ import annotations

import asyncio
import ctypes
import json
import time

import pytest
from tornado.httpclient import HTTPClientError

from gpu_widgets.alerts import AlertEngine, KernelRef, Thresholds
from gpu_widgets.alerts.episodes import EpisodeBook
from gpu_widgets.alerts.rules import FALLBACK_SLOWDOWN_C, evaluate
from gpu_widgets.metrics.throttle import BITS
from gpu_widgets.server.app import GpuWidgets

from .api_schema import validate_response
from .fake_nvml import exported_functions

GIB = 1 << 30
PREFIX = ("gpu-widgets", "api", "v1")


# -- made-up snapshots ----------------------------------------------------------------------------
def device(index=0, **change):
    dev = {"index": index, "uuid": f"GPU-{index}", "name": "Test GPU", "status": "ok",
           "utilization_gpu_percent": 50, "temperature_c": 60, "temperature_slowdown_c": 87,
           "memory_used_bytes": 10 * GIB, "memory_total_bytes": 80 * GIB, "throttle_reasons": 0,
           "processes": [], "unavailable": {}}
    dev.update(change)
    return dev


def snap(t, *devices):
    return {"timestamp": float(t), "devices": list(devices) or [device()]}


def engine(**limits):
    return AlertEngine(Thresholds(**limits))


def feed(eng, t0, t1, make, step=1.0):
    """Ticks from t0 to t1 (exclusive) with ``make(t)`` giving the devices."""
    t = t0
    while t < t1:
        eng.on_sample(snap(t, *make(t)))
        t += step


BAD = {
    "temperature": dict(temperature_c=83),  # 87 - 5
    "memory": dict(memory_used_bytes=77 * GIB),  # 96 %
    "throttle": dict(throttle_reasons=BITS["sw_power_cap"]),
    "lost": dict(status="lost"),
}


@pytest.mark.parametrize("kind", sorted(BAD))
def test_each_rule_fires_once_per_episode_keeps_its_start_and_ends_after_the_hold(kind):
    eng = engine(throttle_s=10)
    feed(eng, 0, 5, lambda t: [device()])
    assert eng.episodes() == [] and eng.version == 0
    feed(eng, 5, 60, lambda t: [device(**BAD[kind])])
    (ep,) = eng.episodes()
    assert eng.version == 1, "one change: the episode opened, nothing after"
    assert ep["kind"] == kind and ep["gpu"] == 0 and ep["uuid"] == "GPU-0" and ep["end"] is None
    assert ep["start"] == 5.0  # throttle: when it began, though it is reported only after 10 s
    assert ep["updated"] == (15.0 if kind == "throttle" else 5.0)
    assert "GPU 0 (Test GPU)" in ep["message"] and "since" in ep["message"]
    assert ep["severity"] == ("error" if kind == "lost" else "warning")
    assert ep["kernel_id"] is None and ep["memory_bytes"] is None
    feed(eng, 60, 62, lambda t: [device()])
    assert eng.episodes()[0]["end"] is None, "clear for 2 s: not over yet (3 s hold)"
    feed(eng, 62, 70, lambda t: [device()])
    (ended,) = eng.episodes()
    assert ended["id"] == ep["id"] and ended["start"] == 5.0 and ended["end"] == 60.0 and ended["updated"] == 63.0
    assert " to " in ended["message"] and "(55 s)" in ended["message"]
    assert eng.version == 2
    feed(eng, 70, 85, lambda t: [device(**BAD[kind])])
    assert len(eng.episodes()) == 2 and eng.episodes()[0]["id"] != ep["id"], "a new episode, a new id"


def test_throttle_shorter_than_the_setting_never_fires():
    eng = engine(throttle_s=30)
    feed(eng, 0, 100, lambda t: [device(throttle_reasons=BITS["hw_thermal_slowdown"] if t % 40 < 29 else 0)])
    assert eng.episodes() == []
    feed(eng, 100, 101, lambda t: [device(throttle_reasons=BITS["gpu_idle"] | BITS["applications_clocks_setting"])])
    assert eng.episodes() == [], "idle and application clocks are not a slowdown"


@pytest.mark.parametrize("kind,values", [
    ("temperature", (83, 81)),  # the way back is 3 °C under the line (82)
    ("memory", (76.5 * GIB, 75.0 * GIB)),  # 95.6 %, 93.75 %: within 2 points
])
def test_a_reading_hovering_at_the_line_is_one_episode(kind, values):
    field = "temperature_c" if kind == "temperature" else "memory_used_bytes"
    eng = engine()
    feed(eng, 0, 200, lambda t: [device(**{field: values[int(t) % 2]})])
    (ep,) = eng.episodes()
    assert ep["kind"] == kind and ep["end"] is None and eng.version == 1


def test_a_short_gap_does_not_end_an_episode_and_two_gpus_are_two_episodes():
    eng = engine(throttle_s=0)
    cap = BITS["sw_power_cap"]
    # GPU 0 clear for 2 s of every 10 (less than the hold); GPU 1 throttled throughout
    feed(eng, 0, 100, lambda t: [device(0, throttle_reasons=0 if t % 10 >= 8 else cap),
                                  device(1, throttle_reasons=cap)])
    assert sorted(e["gpu"] for e in eng.episodes()) == [0, 1] and eng.version == 1
    assert all(e["end"] is None for e in eng.episodes())


def test_the_fallback_slowdown_temperature_when_the_gpu_does_not_tell():
    eng = engine()
    feed(eng, 0, 3, lambda t: [device(temperature_c=84, temperature_slowdown_c=None)])
    assert eng.episodes() == []
    feed(eng, 3, 6, lambda t: [device(temperature_c=FALLBACK_SLOWDOWN_C - 5, temperature_slowdown_c=None)])
    (ep,) = eng.episodes()
    assert "typical slowdown temperature" in ep["message"]


def test_an_idle_gpu_whose_memory_a_kernel_holds():
    eng = engine(idle_minutes=10, idle_kernel_memory_gib=1)
    eng.set_kernels({101: KernelRef("k-1", "train.ipynb"), 102: KernelRef("k-1", "train.ipynb"),
                     201: KernelRef("k-2", None)}, frozenset({"k-1", "k-2"}))
    procs = [{"pid": 101, "used_memory_bytes": 2 * GIB}, {"pid": 102, "used_memory_bytes": GIB // 2},
             {"pid": 201, "used_memory_bytes": GIB // 2},  # under the line
             {"pid": 999, "used_memory_bytes": 9 * GIB}]  # not one of this server's kernels
    feed(eng, 0, 100, lambda t: [device(utilization_gpu_percent=90, processes=procs)])
    feed(eng, 100, 699, lambda t: [device(utilization_gpu_percent=3, processes=procs)])
    assert eng.episodes() == [], "idle for less than 10 minutes"
    feed(eng, 699, 760, lambda t: [device(utilization_gpu_percent=t % 5, processes=procs)])
    (ep,) = eng.episodes()
    assert ep["kind"] == "idle_kernel" and ep["severity"] == "info" and ep["start"] == 700.0
    assert (ep["kernel_id"], ep["notebook_path"], ep["pid"], ep["memory_bytes"]) == ("k-1", "train.ipynb", 101, 2.5 * GIB)
    assert "train.ipynb holds 2.5 GiB on GPU 0 (Test GPU), idle for 10 min 00 s; since" in ep["message"]
    feed(eng, 760, 780, lambda t: [device(utilization_gpu_percent=7, processes=procs)])
    assert eng.episodes()[0]["end"] is None, "a little work (under 10 %) does not end it"
    feed(eng, 780, 790, lambda t: [device(utilization_gpu_percent=40, processes=procs)])
    assert eng.episodes()[0]["end"] == 780.0
    feed(eng, 790, 2000, lambda t: [device(utilization_gpu_percent=0, processes=procs[2:])])
    assert len(eng.episodes()) == 1, "the kernel let go of its memory: no new episode"


def test_mine_watches_only_gpus_this_servers_kernels_use_and_a_lost_one_keeps_them():
    eng = engine(gpus="mine")
    eng.set_kernels({7: KernelRef("k-1", "a.ipynb")}, frozenset({"k-1"}))
    mine = [{"pid": 7, "used_memory_bytes": GIB}]
    feed(eng, 0, 5, lambda t: [device(0, processes=mine), device(1, temperature_c=86)])
    assert eng.episodes() == [], "GPU 1 is hot, but no kernel of ours uses it"
    feed(eng, 5, 10, lambda t: [device(0, status="lost", processes=None), device(1, temperature_c=86)])
    (ep,) = eng.episodes()
    assert (ep["kind"], ep["gpu"]) == ("lost", 0)
    eng.set_kernels({}, frozenset())  # the kernel was shut down
    feed(eng, 10, 20, lambda t: [device(0, status="lost", processes=None)])
    assert eng.episodes()[0]["end"] == 10.0


def test_ended_episodes_are_bounded_in_number_and_in_age():
    eng = AlertEngine(Thresholds(), clear_hold_s=0, keep_s=1000, max_ended=50)
    feed(eng, 0, 800, lambda t: [device(status="lost" if t % 2 else "ok")])
    episodes = eng.episodes()
    assert len(episodes) == 51 and episodes[0]["end"] is None, "400 ended: the newest 50 kept, and the open one"
    assert [e["start"] for e in episodes] == sorted((e["start"] for e in episodes), reverse=True)
    feed(eng, 800, 2000, lambda t: [device()], step=50)
    assert eng.episodes() == [], "and none once they are older than keep_s"
    assert eng.book.open_count == 0 and len(eng._states) == 1


def test_since_gives_what_changed_and_the_body_is_made_once_per_change():
    eng = engine()
    feed(eng, 0, 10, lambda t: [device(0, temperature_c=85), device(1)])
    version, body = eng.body()
    assert eng.body()[1] is body, "the same text for every poller until something changes"
    feed(eng, 10, 20, lambda t: [device(0, temperature_c=85), device(1, status="lost")])
    assert eng.body()[0] == version + 1
    assert [e["kind"] for e in eng.answer(since=5)["episodes"]] == ["lost"]
    assert len(eng.answer()["episodes"]) == 2 and eng.answer(since=20)["episodes"] == []
    assert json.loads(eng.body()[1] + "}")["episodes"] == eng.answer()["episodes"]


def test_disabled_engine_evaluates_nothing():
    eng = AlertEngine(Thresholds(), enabled=False)
    feed(eng, 0, 10, lambda t: [device(status="lost")])
    assert eng.evaluations == 0 and eng.episodes() == [] and eng.answer()["enabled"] is False


def test_rules_leave_the_snapshot_alone():
    dev = device(status="lost")
    before = json.dumps(dev, sort_keys=True)
    evaluate(snap(0, dev), Thresholds(), {}, {})
    assert json.dumps(dev, sort_keys=True) == before
    assert EpisodeBook().published == (0, ())


@pytest.mark.parametrize("name,value,words", [
    ("alert_gpus", "some", "GpuWidgets.alert_gpus must be 'all' or 'mine', got 'some'"),
    ("alert_memory_percent", 120.0, "GpuWidgets.alert_memory_percent must be more than 0 and at most 100, got 120.0"),
    ("alert_idle_minutes", 0.0, "GpuWidgets.alert_idle_minutes must be more than 0 minutes"),
    ("alert_temperature_margin_c", -1.0, "within 0-50 °C"),
    ("alert_throttle_s", float("nan"), "GpuWidgets.alert_throttle_s must be within"),
    ("alert_idle_kernel_memory_gib", 0.0, "more than 0 GiB"),
])
def test_a_bad_setting_turns_the_alerts_off_and_names_the_setting(name, value, words):
    app = GpuWidgets(**{name: value})
    with pytest.raises(ValueError, match="GpuWidgets"):
        app.alert_thresholds()
    eng = app.alert_engine(app.log)
    assert eng.enabled is False and words in eng.problem
    assert GpuWidgets(alert_gpus=" Mine ").alert_thresholds().gpus == "mine"


# -- through real HTTP ----------------------------------------------------------------------------
async def get_alerts(jp_fetch, **params):
    response = await jp_fetch(*PREFIX, "alerts", params=params)
    body = json.loads(response.body)
    validate_response("/alerts", body)
    return response, body


@pytest.fixture
def scripted_faults(monkeypatch):
    # Seconds after the backend opens: GPU 1 lost for 2 s, GPU 0 held at its power cap for 3 s.
    monkeypatch.setenv("GPU_WIDGETS_SIMULATED_FAULTS", "lost:1@1-3; throttle:0@1-4:sw_power_cap")


@pytest.mark.parametrize("gw_config", [{"backend": "simulated", "interval_s": 0.1, "alert_throttle_s": 1.0}])
async def test_scripted_faults_appear_as_episodes_that_start_then_end(scripted_faults, jp_fetch):
    seen: dict[str, list[dict]] = {}
    deadline = time.monotonic() + 40
    while True:
        _, body = await get_alerts(jp_fetch)
        for ep in body["episodes"]:
            seen.setdefault(ep["kind"], []).append(ep)
        ends = {kind: eps[-1]["end"] for kind, eps in seen.items()}
        if ends.get("lost") and ends.get("throttle"):
            break
        assert time.monotonic() < deadline, f"timed out; seen: {seen}"
        await asyncio.sleep(0.1)
    assert body["enabled"] is True and body["problem"] is None
    assert set(seen) == {"lost", "throttle"}, seen
    for kind, gpu in (("lost", 1), ("throttle", 0)):
        first, last = seen[kind][0], seen[kind][-1]
        assert first["end"] is None, f"{kind}: first seen open"
        assert {e["id"] for e in seen[kind]} == {first["id"]}, f"{kind}: one episode"
        assert first["gpu"] == last["gpu"] == gpu and first["start"] == last["start"] < last["end"]
        assert last["uuid"].startswith("GPU-") and "Simulated NVIDIA H100" in last["message"]
    assert "power cap" in seen["throttle"][0]["message"]
    assert 1.5 < seen["throttle"][-1]["end"] - seen["throttle"][-1]["start"] < 6  # 3 s of throttling, wide margins

    # ETag: nothing changes now, so the same tag comes back and If-None-Match gets a bodiless 304
    response, body = await get_alerts(jp_fetch)
    tag = response.headers["Etag"]
    assert tag.startswith('W/"alerts-') and response.headers["Cache-Control"] == "private, no-cache"
    again = await jp_fetch(*PREFIX, "alerts", headers={"If-None-Match": tag}, raise_error=False)
    assert again.code == 304 and again.body == b""
    # since: only what changed after it
    _, later = await get_alerts(jp_fetch, since=str(body["server_time"]))
    assert later["episodes"] == [] and later["version"] == body["version"]
    _, earlier = await get_alerts(jp_fetch, since=str(seen["lost"][0]["start"] - 1))
    assert {e["kind"] for e in earlier["episodes"]} == {"lost", "throttle"}


async def test_alerts_need_the_token_and_refuse_bad_parameters(jp_fetch):
    with pytest.raises(HTTPClientError) as info:
        await jp_fetch(*PREFIX, "alerts", headers={"Authorization": ""})
    assert info.value.code == 403
    validate_response("error", json.loads(info.value.response.body))
    for params, words in (({"since": "-1"}, "since: expected unix seconds >= 0"),
                          ({"since": "soon"}, "since: expected unix seconds (a number)"),
                          ({"until": "1"}, "until: unknown parameter (valid: since)")):
        with pytest.raises(HTTPClientError) as info:
            await jp_fetch(*PREFIX, "alerts", params=params)
        assert info.value.code == 400
        body = json.loads(info.value.response.body)
        validate_response("error", body)
        assert body["code"] == "bad_parameter" and words in body["message"]


@pytest.mark.parametrize("gw_config", [
    {"backend": "simulated", "interval_s": 0.1, "alerts_enabled": False},
    {"backend": "simulated", "interval_s": 0.1, "alert_gpus": "theirs"},
])
async def test_alerts_off_or_misconfigured_answer_so_and_evaluate_nothing(gw_config, jp_fetch, jp_serverapp):
    await asyncio.sleep(1.0)  # ten ticks
    _, body = await get_alerts(jp_fetch)
    assert body["enabled"] is False and body["episodes"] == []
    assert jp_serverapp.web_app.settings["gpu_widgets_alerts"].evaluations == 0
    if "alert_gpus" in gw_config:
        assert "GpuWidgets.alert_gpus must be 'all' or 'mine', got 'theirs'" in body["problem"]
    else:
        assert body["problem"] is None
    status = json.loads((await jp_fetch(*PREFIX, "status")).body)
    assert status["status"] in ("ok", "starting"), "the rest of the extension works"


IDLE_GPU = {"gpus": [{"util_gpu": 0, "memory_used": 3 * GIB}, {"util_gpu": 80}]}


@pytest.mark.parametrize("fake_nvml_config", [IDLE_GPU])
@pytest.mark.parametrize("gw_config", [{"backend": "nvml", "interval_s": 0.1, "slow_interval_s": 0.2,
                                        "alert_idle_minutes": 0.02, "alert_gpus": "mine"}])
async def test_a_real_kernel_holding_memory_on_an_idle_gpu(in_process_fake_nvml, jp_fetch, jp_serverapp):
    session = json.loads((await jp_fetch("api", "sessions", method="POST", body=json.dumps(
        {"path": "idle.ipynb", "type": "notebook", "name": "idle.ipynb", "kernel": {"name": "python3"}}))).body)
    kernel_id = session["kernel"]["id"]
    pid = jp_serverapp.kernel_manager.get_kernel(kernel_id).provisioner.pid
    # The fake driver lists the kernel's process on GPU 0 (as a real one would once it made a context)
    gpus = [dict(g) for g in IDLE_GPU["gpus"]]
    gpus[0]["procs"] = [(pid, 2 * GIB)]
    in_process_fake_nvml({"gpus": gpus})
    deadline = time.monotonic() + 30  # attribution runs every 5 s
    while not (eps := (await get_alerts(jp_fetch))[1]["episodes"]):
        assert time.monotonic() < deadline, "no idle-kernel alert"
        await asyncio.sleep(0.2)
    (ep,) = eps
    assert (ep["kind"], ep["gpu"], ep["kernel_id"], ep["notebook_path"], ep["pid"], ep["memory_bytes"]) == (
        "idle_kernel", 0, kernel_id, "idle.ipynb", pid, 2 * GIB)
    assert ep["end"] is None and "idle.ipynb holds 2.0 GiB on GPU 0" in ep["message"]
    await jp_fetch("api", "sessions", session["id"], method="DELETE")
    in_process_fake_nvml(IDLE_GPU)  # the process is gone, and its memory with it
    deadline = time.monotonic() + 30
    while (await get_alerts(jp_fetch))[1]["episodes"][0]["end"] is None:
        assert time.monotonic() < deadline, "the episode did not end"
        await asyncio.sleep(0.2)


HOT = {"gpus": [{"util_gpu": 0, "temperature": 86, "memory_used": 82 * GIB, "clocks_event_reasons": 0x24,
                 "procs": [(4_300_001, 2 * GIB)]}, {"error": {"*": 15}}]}


@pytest.mark.parametrize("fake_nvml_config", [HOT])
def test_the_alert_evaluation_adds_no_nvml_calls(in_process_fake_nvml, fake_nvml_lib):
    from gpu_widgets.backends import open_backend
    from gpu_widgets.sampling.sampler import Sampler

    lib = ctypes.CDLL(str(fake_nvml_lib / "libnvidia-ml.so.1"))
    lib.fakeNvmlCallCount.restype = ctypes.c_ulonglong
    lib.fakeNvmlCallCount.argtypes = [ctypes.c_char_p]
    names = sorted(exported_functions())
    sampler = Sampler(open_backend("nvml"), interval_s=0.1)

    def rounds(n):
        lib.fakeNvmlResetCallCounts()
        for _ in range(n):
            sampler._read_slow()
            sampler.tick()
        return lib.fakeNvmlCallCount(b"*"), _per_function(lib, names)

    rounds(3)  # unsupported fields are learnt once: counts are steady after
    off = rounds(20)
    eng = AlertEngine(Thresholds(throttle_s=0, idle_minutes=1e-6))
    eng.set_kernels({4_300_001: KernelRef("k", "n.ipynb")}, frozenset({"k"}))
    sampler.subscribe(eng.on_sample)
    on = rounds(20)
    assert eng.evaluations == 20 and off[0] > 0
    kinds = {e["kind"] for e in eng.episodes()}
    assert kinds == {"lost", "temperature", "throttle", "memory", "idle_kernel"}, "every rule ran"
    assert on == off, "the alerts made NVML calls"


def _per_function(lib, names):
    return {n: lib.fakeNvmlCallCount(n.encode()) for n in names}
