"""Heavy history requests (``samples``) through real HTTP with auth on: the answer is bounded over
all GPUs whatever the parameters, it says how, and the work runs off the event loop."""
from __future__ import annotations

import json
import threading

import pytest
from tornado.httpclient import HTTPClientError

from gpu_widgets.store.history import History

from .api_schema import validate_response
from .test_server_api import PREFIX, get_json, wait_for

MANY_GPUS = {"backend": "simulated", "interval_s": 0.1, "window_s": 600.0}


@pytest.fixture
def many_gpus(monkeypatch: pytest.MonkeyPatch) -> int:
    monkeypatch.setenv("GPU_WIDGETS_SIMULATED_GPUS", "64")
    return 64


def service_of(jp_serverapp):
    return jp_serverapp.web_app.settings["gpu_widgets_service"]


def fill_window(service) -> int:
    """Give the sampler a full window of history (as a server up for window_s), each sample a
    copy of the latest one with its own utilization, so that downsampling has real work."""
    sampler = service.sampler
    latest = sampler.latest
    old = sampler.history
    new = History(window_s=old.window_s, interval_s=sampler.interval_s)
    n = int(old.window_s / sampler.interval_s)
    for k in range(n, 0, -1):
        devices = [{**d, "utilization_gpu_percent": float(k % 101)} for d in latest["devices"]]
        new.append({"timestamp": latest["timestamp"] - k * sampler.interval_s, "devices": devices})
    sampler.history = new
    return n


@pytest.mark.parametrize("gw_config", [MANY_GPUS])
async def test_an_answer_is_bounded_over_all_gpus_and_says_how(many_gpus, jp_fetch, jp_serverapp, gw_config):
    # Given 64 GPUs with a full 10 min window at 10 Hz (6000 samples each)
    await wait_for(jp_fetch, lambda s: s["device_count"] == many_gpus)
    await wait_for(jp_fetch, lambda s: len(s["devices"]) == many_gpus, path=("samples", "latest"))
    service = service_of(jp_serverapp)
    fill_window(service)
    # When a client asks for everything at the most points per GPU it may
    response = await jp_fetch(*PREFIX, "samples", params={"since": "1", "max_points": "5000"})
    body = json.loads(response.body)
    # Then the answer holds max_response_points over all GPUs (not 5000 each: ~48 MB) ...
    validate_response("/samples", body)
    assert body["max_points"] == 32000 // many_gpus == 500
    assert len(response.body) <= 8 << 20, len(response.body)
    assert len(body["devices"]) == many_gpus
    assert 250 < len(body["timestamps"]) <= 500
    # ... downsampled so every peak and dip of the window is still there
    for dev in body["devices"]:
        assert len(dev["utilization_gpu_percent"]) == len(body["timestamps"])
        assert max(dev["utilization_gpu_percent"]) == 100.0 and min(dev["utilization_gpu_percent"]) == 0.0
    # and a client asking for fewer points than the budget gets what it asked
    small = await get_json(jp_fetch, "samples", params={"max_points": "120"})
    assert small["max_points"] == 120 and len(small["timestamps"]) <= 120


@pytest.mark.parametrize("gw_config", [{"backend": "simulated", "interval_s": 0.1, "max_response_points": 40}])
async def test_the_point_budget_is_a_setting(jp_fetch, gw_config):
    # Given 2 GPUs and a budget of 40 points, when more than 30 samples (3 s at 10 Hz) are held,
    body = await wait_for(jp_fetch, lambda b: b["timestamps"] and b["timestamps"][-1] - b["timestamps"][0] > 3,
                          path=("samples",))
    # then the whole window comes in 20 points per GPU
    assert body["max_points"] == 40 // 2 and len(body["timestamps"]) <= 20
    # the budget lowers max_points; it never widens what may be asked
    with pytest.raises(HTTPClientError) as info:
        await jp_fetch(*PREFIX, "samples", params={"max_points": "5001"})
    assert info.value.code == 400
    assert "max_points: expected a whole number from 2 to 5000, got 5001" in json.loads(info.value.response.body)["message"]


@pytest.mark.parametrize("gw_config", [MANY_GPUS])
async def test_a_heavy_request_runs_off_the_event_loop_and_an_increment_on_it(many_gpus, jp_fetch, jp_serverapp, gw_config):
    await wait_for(jp_fetch, lambda s: len(s["devices"]) == many_gpus, path=("samples", "latest"))
    service = service_of(jp_serverapp)
    service.sampler.stop()  # no new sample may turn the increment below into a bigger request
    fill_window(service)
    threads: list[str] = []
    history = service.samples.history
    service.samples.history = lambda since, max_points, until=None: (threads.append(threading.current_thread().name)
                                                                     or history(since, max_points, until))
    # the whole window of 64 GPUs: made on the history worker
    whole = await get_json(jp_fetch, "samples", params={"max_points": "600"})
    assert threads == ["gpu-widgets-history_0"]
    # the last 30 s of 64 GPUs (300 x 64 samples; 235 ms on the loop before): on the worker too
    await get_json(jp_fetch, "samples", params={"since": repr(whole["timestamps"][-1] - 30)})
    assert threads[1:] == ["gpu-widgets-history_0"]
    # a poll's increment (at most 256 samples x GPUs): on the loop, where it is cheapest
    await get_json(jp_fetch, "samples", params={"since": repr(whole["timestamps"][-1])})
    assert threads[2:] == [threading.current_thread().name]


def hand_ticked_service():
    """A service over 2 simulated GPUs whose sampler is ticked by hand (30 samples to start)."""
    from gpu_widgets.backends import SimulatedBackend
    from gpu_widgets.service.service import GpuService

    service = GpuService(backend=SimulatedBackend(n_gpus=2, seed=1), interval_s=0.1, window_s=60.0)
    service.start_in_background()
    assert service.wait_ready(30)
    service.sampler.stop()
    for _ in range(30):
        service.sampler.tick()
    return service


def test_identical_requests_waiting_for_the_worker_share_one_answer():
    service = hand_ticked_service()
    made = []
    answers = service.samples
    history = answers.history
    answers.history = lambda since, max_points, until=None: made.append((since, max_points)) or history(since, max_points, until)
    gate = threading.Event()
    answers._history_pool.submit(gate.wait, 30)  # the worker is busy with a heavy answer
    since = service.sampler.history.since(None)["timestamps"][10]  # not the whole window
    whole = [answers.body_in_worker(None, 600) for _ in range(3)] + [answers.body_in_worker(0.0, 600)]
    recent = [answers.body_in_worker(since, 600) for _ in range(2)]
    other = answers.body_in_worker(since, 300)
    gate.set()
    assert len({id(f) for f in whole}) == 1 and len({id(f) for f in recent}) == 1
    assert other is not recent[0] and recent[0] is not whole[0]
    assert json.loads(whole[0].result(30).raw + b"}")["max_points"] == 600
    assert recent[0].result(30).raw != other.result(30).raw
    assert len(made) == 3
    # once answered, the next request is made afresh (with the samples that came since)
    service.sampler.tick()
    assert answers.body_in_worker(since, 600) is not recent[0]
    service.stop()


def test_a_whole_window_answer_serves_for_a_second_then_brings_the_new_samples(monkeypatch):
    from gpu_widgets.service import samples as samples_module

    service = hand_ticked_service()
    first = service.samples.json(None, 100)
    service.sampler.tick()  # a new sample, but clients asking for the hour again and again share one answer
    assert service.samples.json(None, 100) == first
    monkeypatch.setattr(samples_module, "WINDOW_REUSE_S", 0.0)  # once it is old enough
    again = json.loads(service.samples.json(None, 100))
    assert len(again["timestamps"]) == len(json.loads(first)["timestamps"]) + 1
    service.stop()


@pytest.mark.parametrize("gw_config", [{"backend": "simulated", "interval_s": 0.1, "window_s": 600.0}])
async def test_until_answers_the_older_stretch_alone_and_a_bad_one_names_itself(jp_fetch, jp_serverapp, gw_config):
    await wait_for(jp_fetch, lambda s: s["device_count"] == 2)
    service = service_of(jp_serverapp)
    service.sampler.stop()
    fill_window(service)
    times = service.sampler.history.since(None)["timestamps"]
    since, until = times[100], times[400]
    # A sidebar whose window grew holds the samples after `until`: it asks for those before.
    older = await get_json(jp_fetch, "samples", params={"since": repr(since), "until": repr(until), "max_points": "50"})
    validate_response("/samples", older)
    assert 0 < len(older["timestamps"]) <= 50 and older["timestamps"][-1] <= until < times[401]
    assert all(since < t for t in older["timestamps"])
    assert all(len(d["utilization_gpu_percent"]) == len(older["timestamps"]) for d in older["devices"])
    exact = await get_json(jp_fetch, "samples", params={"since": repr(since), "until": repr(until), "max_points": "5000"})
    assert exact["timestamps"] == times[101:401]
    for query, message in [({"since": "5", "until": "5"}, "until: expected unix seconds after since (5.0), got 5.0"),
                           ({"until": "-1"}, "until: expected unix seconds >= 0, got '-1'"),
                           ({"until": "soon"}, "until")]:
        with pytest.raises(HTTPClientError) as info:
            await jp_fetch(*PREFIX, "samples", params=query)
        assert info.value.code == 400
        assert message in json.loads(info.value.response.body)["message"]
