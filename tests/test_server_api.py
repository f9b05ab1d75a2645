"""The server extension through real HTTP with auth on: every endpoint, every error path."""
from __future__ import annotations

import asyncio
import json
import os
import time
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

import psutil
import pytest
from tornado.httpclient import HTTPClientError

from gpu_widgets import __version__
from gpu_widgets.backends import ENV_SEED
from gpu_widgets.backends.simulated import SimulatedBackend
from gpu_widgets.metrics import catalogue, throttle
from gpu_widgets.metrics.fields import SAMPLE_FIELDS

from .api_schema import validate_response

GIB = 1 << 30
PREFIX = ("gpu-widgets", "api", "v1")


async def get_json(jp_fetch, *path: str, params: dict | None = None, **kw):
    response = await jp_fetch(*PREFIX, *path, params=params or {}, **kw)
    assert response.headers["Content-Type"].startswith("application/json")
    return json.loads(response.body)


async def wait_for(jp_fetch, predicate, path=("status",), timeout=20.0):
    deadline = time.monotonic() + timeout
    while True:
        body = await get_json(jp_fetch, *path)
        if predicate(body):
            return body
        assert time.monotonic() < deadline, f"timed out; last answer: {body}"
        await asyncio.sleep(0.1)


@asynccontextmanager
async def notebook_kernel(jp_fetch, jp_serverapp) -> AsyncIterator[tuple[str, int]]:
    """A session on experiments/train.ipynb with a python3 kernel, as JupyterLab opens one: its
    kernel's id and pid. The session is deleted afterwards."""
    response = await jp_fetch("api", "sessions", method="POST", body=json.dumps(
        {"path": "experiments/train.ipynb", "type": "notebook", "name": "train.ipynb", "kernel": {"name": "python3"}}))
    session = json.loads(response.body)
    kernel_id = session["kernel"]["id"]
    try:
        yield kernel_id, jp_serverapp.kernel_manager.get_kernel(kernel_id).provisioner.pid
    finally:
        await jp_fetch("api", "sessions", session["id"], method="DELETE")


async def test_status_reports_the_backend_interval_time_and_version(jp_fetch):
    status = await wait_for(jp_fetch, lambda s: s["status"] != "starting")
    validate_response("/status", status)
    assert status["backend"] == "simulated" and status["status"] == "ok" and status["reason"] is None
    assert status["cuda_driver_version"] == "13.0"
    assert status["interval_s"] == 0.1
    assert status["version"] == __version__
    assert abs(status["server_time"] - time.time()) < 5
    assert status["device_count"] == 2


async def test_devices_are_spec_cards(jp_fetch):
    await wait_for(jp_fetch, lambda s: s["status"] == "ok")
    body = await get_json(jp_fetch, "devices")
    validate_response("/devices", body)
    assert [d["index"] for d in body["devices"]] == [0, 1]
    card = body["devices"][0]
    assert card["name"].startswith("Simulated ")
    assert card["compute_capability"] == "9.0"
    assert card["memory_bandwidth_bytes_per_s"] > 3e12


async def test_latest_sample_is_the_snapshot_json(jp_fetch):
    snap = await wait_for(jp_fetch, lambda s: len(s["devices"]) == 2 and s["devices"][0]["processes"] is not None,
                          path=("samples", "latest"))
    validate_response("/samples/latest", snap)
    assert snap["backend"] == "simulated"
    assert {f.name for f in SAMPLE_FIELDS} <= set(snap["devices"][0])
    assert abs(snap["timestamp"] - time.time()) < 5


async def test_samples_history_is_incremental_and_downsampled(jp_fetch):
    await wait_for(jp_fetch, lambda s: len(s["timestamps"]) >= 5, path=("samples",))
    full = await get_json(jp_fetch, "samples")
    validate_response("/samples", full)
    assert full["interval_s"] == 0.1
    ts = full["timestamps"]
    assert ts == sorted(ts)
    for dev in full["devices"]:
        assert len(dev["utilization_gpu_percent"]) == len(ts) == len(dev["throttle_reasons"]) == len(dev["lost"])
    newer = await get_json(jp_fetch, "samples", params={"since": ts[-2]})
    assert newer["timestamps"][0] == ts[-1]
    assert all(t > ts[-2] for t in newer["timestamps"])
    await wait_for(jp_fetch, lambda s: len(s["timestamps"]) >= 12, path=("samples",))
    small = await get_json(jp_fetch, "samples", params={"max_points": 4})
    assert 2 <= len(small["timestamps"]) <= 4


@pytest.fixture
def busy_gpus(monkeypatch: pytest.MonkeyPatch) -> None:
    """A seed whose two simulated GPUs both run jobs for the next minute: each GPU rests ~23 s of
    every 240 s, longer than a wait may last, so a fixed seed fails whenever a test starts then."""
    def busy_for_a_minute(seed: int) -> bool:
        sim = SimulatedBackend(2, seed=seed)
        sim.open()
        now = time.time()
        return all(all(g["processes"] for g in sim.read_slow(now + s)) for s in range(0, 61, 2))
    monkeypatch.setenv(ENV_SEED, str(next(s for s in range(240) if busy_for_a_minute(s))))


async def test_processes_of_other_users_are_hidden(busy_gpus, jp_fetch):
    body = await wait_for(jp_fetch, lambda b: b["devices"] and all(d["processes"] for d in b["devices"]),
                          path=("processes",))
    validate_response("/processes", body)
    procs = [p for d in body["devices"] for p in d["processes"]]
    mine = [p for p in procs if p["user"] is not None]
    theirs = [p for p in procs if p["user"] is None]
    assert mine and theirs, body  # the simulated GPU 1 hosts a job of "simulated-colleague"
    for p in mine:
        assert p["uid"] == os.getuid() and p["user"] == psutil.Process().username() and p["command"] and p["name"]
    for p in theirs:
        assert p["name"] is None and p["command"] is None and p["used_memory_bytes"] > 0
        assert "another user" in p["unavailable"]["command"]
    for p in procs:
        assert p["kernel_id"] is None and p["notebook_path"] is None
    latest = await get_json(jp_fetch, "samples", "latest")
    latest_procs = [p for d in latest["devices"] for p in d["processes"] or ()]
    assert {p["pid"] for p in latest_procs if p["command"] is None} == {p["pid"] for p in theirs}


@pytest.mark.parametrize("gw_config", [{"backend": "simulated", "interval_s": 0.1, "show_other_users_processes": True}])
async def test_other_users_processes_are_shown_when_configured(busy_gpus, jp_fetch, gw_config):
    body = await wait_for(jp_fetch, lambda b: any(d["processes"] for d in b["devices"]), path=("processes",))
    procs = [p for d in body["devices"] for p in d["processes"]]
    assert "simulated-colleague" in {p["user"] for p in procs}
    assert all(p["command"] for p in procs)


async def test_openapi_document_is_served(jp_fetch):
    doc = await get_json(jp_fetch, "openapi.json")
    assert doc["openapi"].startswith("3.")
    assert {"/status", "/devices", "/samples/latest", "/samples", "/processes", "/metrics"} <= set(doc["paths"])


async def test_metric_catalogue_is_served_as_the_catalogue_says(jp_fetch):
    response = await jp_fetch(*PREFIX, "metrics")
    body = json.loads(response.body)
    validate_response("/metrics", body)
    assert body["metrics"] == [m.as_json() for m in catalogue.METRICS]
    assert [m["id"] for m in body["metrics"]] == ["utilization", "sm_active", "tensor_active", "memory",
                                                  "memory_controller", "temperature", "power"]
    busy = body["metrics"][0]
    assert (busy["title"], busy["field"], busy["y_max"]) == ("GPU busy (%)", "utilization_gpu_percent", 100.0)
    assert body["throttle_reasons"][0] == {"name": "sw_power_cap", "label": "power cap", "slowdown": True}
    assert [(r["name"], r["label"]) for r in body["throttle_reasons"]] == list(throttle.LABELS.items())
    assert {r["name"] for r in body["throttle_reasons"] if r["slowdown"]} == throttle.SLOWDOWNS
    # Fixed while the server runs: browsers may keep it, then revalidate it for an empty 304.
    assert response.headers["Cache-Control"] == "private, max-age=300"
    with pytest.raises(HTTPClientError) as info:
        await jp_fetch(*PREFIX, "metrics", headers={"If-None-Match": response.headers["Etag"]})
    assert info.value.code == 304


async def test_metric_catalogue_is_403_without_a_token(jp_fetch):
    for headers in ({"Authorization": ""}, {"Authorization": "token wrong"}):
        with pytest.raises(HTTPClientError) as info:
            await jp_fetch(*PREFIX, "metrics", headers=headers)
        assert info.value.code == 403
        body = json.loads(info.value.response.body)
        validate_response("error", body)
        assert body["code"] == "forbidden" and "token" in body["message"]


@pytest.mark.parametrize(
    "params,words",
    [
        ({"since": "yesterday"}, "since: expected unix seconds (a number), got 'yesterday'"),
        ({"since": "-5"}, "since: expected unix seconds >= 0"),
        ({"since": "nan"}, "since: expected unix seconds >= 0"),
        ({"since": "inf"}, "since: expected unix seconds >= 0"),
        ({"max_points": "lots"}, "max_points: expected a whole number from 2 to 5000, got 'lots'"),
        ({"max_points": "1"}, "max_points: expected a whole number from 2 to 5000, got 1"),
        ({"max_points": "100000"}, "max_points: expected a whole number from 2 to 5000, got 100000"),
        ({"max_points": "2.5"}, "max_points: expected a whole number"),
        ({"sinse": "1"}, "sinse: unknown parameter (valid: since, until, max_points)"),
    ],
)
async def test_bad_parameters_are_400_with_a_message_naming_them(jp_fetch, params, words):
    with pytest.raises(HTTPClientError) as info:
        await jp_fetch(*PREFIX, "samples", params=params)
    assert info.value.code == 400
    body = json.loads(info.value.response.body)
    assert body["code"] == "bad_parameter"
    assert words in body["message"]
    validate_response("error", body)


async def test_repeated_parameter_is_400(jp_fetch):
    with pytest.raises(HTTPClientError) as info:
        await jp_fetch(*PREFIX, "samples", params=[("since", "1"), ("since", "2")])
    assert info.value.code == 400
    assert "since: given more than once" in json.loads(info.value.response.body)["message"]


# samples/latest takes `gpm` (tests/test_gpm.py checks its message), processes its paging
# (tests/test_big_machine.py)
@pytest.mark.parametrize("path", ["status", "devices", "metrics", "openapi.json"])
async def test_parameters_on_routes_without_any_are_400(jp_fetch, path):
    with pytest.raises(HTTPClientError) as info:
        await jp_fetch(*PREFIX, *path.split("/"), params={"verbose": "1"})
    assert info.value.code == 400
    assert "verbose: unknown parameter (valid: none)" in json.loads(info.value.response.body)["message"]


async def test_unknown_endpoint_is_a_json_404(jp_fetch):
    with pytest.raises(HTTPClientError) as info:
        await jp_fetch(*PREFIX, "gpus")
    assert info.value.code == 404
    body = json.loads(info.value.response.body)
    assert body["code"] == "not_found" and "openapi.json" in body["message"]


def registered_routes(app) -> list[str]:
    """Every URL pattern the extension registered, read from the running app."""
    patterns = []

    def walk(router) -> None:
        for rule in getattr(router, "rules", ()):
            regex = getattr(rule.matcher, "regex", None)
            if regex is not None and "/gpu-widgets/" in regex.pattern:
                patterns.append(regex.pattern)
            walk(rule.target)

    walk(app.web_app.default_router)
    return patterns


# The API's writes: the Settings Editor's alert thresholds (docs/alerts.md), Kill of an orphan.
WRITE_ROUTES = {"api/v1/alerts/settings": "PUT", "api/v1/processes/(.*)/kill": "POST"}


async def test_every_route_is_403_without_a_token(jp_fetch, jp_serverapp):
    patterns = registered_routes(jp_serverapp)
    assert len(patterns) >= 7 and set(WRITE_ROUTES) <= {p.split("/gpu-widgets/", 1)[1].rstrip("$") for p in patterns}
    for pattern in patterns:
        route = pattern.split("/gpu-widgets/", 1)[1].rstrip("$")
        path, method = route.replace("(.*)", "anything"), WRITE_ROUTES.get(route, "GET")
        write = {} if method == "GET" else {"method": method, "body": "{}"}
        for headers in ({"Authorization": ""}, {"Authorization": "token wrong"}):
            with pytest.raises(HTTPClientError) as info:
                await jp_fetch("gpu-widgets", *path.split("/"), headers=headers, **write)
            assert info.value.code == 403, pattern
            body = json.loads(info.value.response.body)
            # A write without a token meets Jupyter's XSRF check first: refused too, and says why.
            assert body["code"] == "forbidden" and ("token" in body["message"] or write and "_xsrf" in body["message"])


NVML_SERVER = {"backend": "nvml", "interval_s": 0.1}
DICTATED = {"driver_version": "580.95.05", "cuda_driver_version": 12080, "gpus": [
    {"name": "NVIDIA H200", "util_gpu": 97, "util_memory": 41, "memory_total": 141 * GIB,
     "memory_used": 37 * GIB, "temperature": 71, "power_mw": 612_500, "power_limit_mw": 700_000,
     "procs": [(os.getpid(), 20 * GIB)], "error": {"nvmlDeviceGetFanSpeed": 3}},
    {"name": "NVIDIA H200", "util_gpu": 3},
]}


@pytest.mark.parametrize("gw_config,fake_nvml_config", [(NVML_SERVER, DICTATED)])
async def test_values_from_the_driver_reach_the_api_exactly(in_process_fake_nvml, jp_fetch):
    status = await wait_for(jp_fetch, lambda s: s["status"] != "starting")
    assert (status["backend"], status["status"], status["driver_version"]) == ("nvml", "ok", "580.95.05")
    assert status["cuda_driver_version"] == "12.8"
    snap = await wait_for(jp_fetch, lambda s: s["devices"] and s["devices"][0]["processes"] is not None,
                          path=("samples", "latest"))
    validate_response("/samples/latest", snap)
    d0, d1 = snap["devices"]
    assert (d0["utilization_gpu_percent"], d0["utilization_memory_percent"]) == (97, 41)
    assert (d0["memory_used_bytes"], d0["memory_total_bytes"]) == (37 * GIB, 141 * GIB)
    assert (d0["temperature_c"], d0["power_w"], d0["power_limit_w"]) == (71, 612.5, 700.0)
    assert d0["fan_percent"] is None and d0["unavailable"]["fan_percent"] == "not supported on this GPU"
    assert d1["utilization_gpu_percent"] == 3
    # our own process: shown in full, and it is not a kernel of this server
    procs = (await get_json(jp_fetch, "processes"))["devices"][0]["processes"]
    assert procs[0]["pid"] == os.getpid() and procs[0]["command"] and procs[0]["kernel_id"] is None


@pytest.mark.parametrize("gw_config,fake_nvml_config", [(NVML_SERVER, {"gpus": [{"util_gpu": 50}, {"util_gpu": 60}]})])
async def test_a_lost_gpu_shows_lost_and_comes_back_without_a_restart(in_process_fake_nvml, jp_fetch):
    await wait_for(jp_fetch, lambda s: len(s["devices"]) == 2, path=("samples", "latest"))
    in_process_fake_nvml({"gpus": [{"util_gpu": 51}, {"util_gpu": 60, "error": {"*": 15}}]})
    snap = await wait_for(jp_fetch, lambda s: s["devices"][1]["status"] == "lost", path=("samples", "latest"))
    assert snap["devices"][0]["status"] == "ok" and snap["devices"][0]["utilization_gpu_percent"] == 51
    assert snap["devices"][1]["utilization_gpu_percent"] is None
    in_process_fake_nvml({"gpus": [{"util_gpu": 52}, {"util_gpu": 61}]})
    snap = await wait_for(jp_fetch, lambda s: s["devices"][1]["status"] == "ok", path=("samples", "latest"), timeout=15)
    assert snap["devices"][1]["utilization_gpu_percent"] == 61
    cards = await wait_for(jp_fetch, lambda b: b["devices"][1]["status"] == "ok", path=("devices",))
    assert cards["devices"][1]["cores"] is not None


@pytest.mark.parametrize("gw_config,fake_nvml_config", [(NVML_SERVER, {"init_error": 9})])
async def test_no_driver_is_a_no_gpu_status_with_the_reason(in_process_fake_nvml, jp_fetch):
    status = await wait_for(jp_fetch, lambda s: s["status"] != "starting")
    assert status["status"] == "no_gpu" and "driver is not loaded" in status["reason"]
    snap = await get_json(jp_fetch, "samples", "latest")
    assert snap["status"] == "no_gpu" and snap["devices"] == []
    validate_response("/samples/latest", snap)
    for path in ("devices", "samples", "processes"):
        body = await get_json(jp_fetch, *path.split("/"))
        validate_response(f"/{path}", body)


@pytest.mark.parametrize("gw_config,fake_nvml_config", [(NVML_SERVER, {"gpus": [{"util_gpu": 10}]})])
async def test_a_kernels_gpu_process_names_its_notebook(in_process_fake_nvml, jp_fetch, jp_serverapp):
    async with notebook_kernel(jp_fetch, jp_serverapp) as (kernel_id, pid):
        in_process_fake_nvml({"gpus": [{"util_gpu": 10, "procs": [(pid, 3 * GIB), (os.getpid(), GIB)]}]})
        body = await wait_for(jp_fetch, lambda b: len(b["devices"][0]["processes"] or ()) == 2, path=("processes",))
        validate_response("/processes", body)
        by_pid = {p["pid"]: p for p in body["devices"][0]["processes"]}
        assert by_pid[pid]["kernel_id"] == kernel_id
        assert by_pid[pid]["notebook_path"] == "experiments/train.ipynb"
        assert by_pid[os.getpid()]["kernel_id"] is None


@pytest.mark.integration
def test_a_child_of_a_kernel_belongs_to_that_kernel():
    import subprocess
    import sys

    from gpu_widgets.service.attribution import owning_kernel

    child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(30)"])
    sibling = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(30)"])
    try:
        assert owning_kernel(child.pid, {os.getpid(): "k-1"}) == "k-1"
        assert owning_kernel(child.pid, {sibling.pid: "k-2"}) is None  # not an ancestor
        assert owning_kernel(4_300_000, {os.getpid(): "k-1"}) is None  # no such pid
    finally:
        for p in (child, sibling):
            p.kill()
            p.wait()


async def test_every_route_refuses_writes(jp_fetch, jp_serverapp):
    """The API is read-only but for WRITE_ROUTES: no other route or method accepts a write."""
    for pattern in registered_routes(jp_serverapp):
        route = pattern.split("/gpu-widgets/", 1)[1].rstrip("$")
        path = route.replace("(.*)", "anything")
        for method in ("POST", "PUT", "PATCH", "DELETE"):
            if WRITE_ROUTES.get(route) == method:
                continue  # tests/test_alerts_settings_api.py, tests/test_orphans.py
            body = "{}" if method in ("POST", "PUT", "PATCH") else None
            with pytest.raises(HTTPClientError) as info:
                await jp_fetch("gpu-widgets", *path.split("/"), method=method, body=body)
            assert info.value.code in (403, 405), (method, pattern, info.value.code)
            assert json.loads(info.value.response.body)["code"] in ("forbidden", "method_not_allowed")


async def test_jupyterlab_cache_buster_is_accepted(jp_fetch):
    # ServerConnection.makeRequest adds "?<Date.now()>" to GETs by default
    response = await jp_fetch(*PREFIX, "status", params={"1796228257871": ""})
    assert json.loads(response.body)["version"] == __version__
    with pytest.raises(HTTPClientError) as info:
        await jp_fetch(*PREFIX, "status", params={"1796228257871": "x"})
    assert info.value.code == 400


@pytest.mark.parametrize("gw_config", [{"backend": "simulated", "interval_s": 0.1}])
async def test_history_says_why_the_latest_values_are_null(jp_fetch, gw_config):
    body = await wait_for(jp_fetch, lambda b: len(b["timestamps"]) >= 2, path=("samples",))
    validate_response("/samples", body)
    # the simulated H100 reports no fan, like the real passively cooled board
    assert all("passively cooled" in d["unavailable"]["fan_percent"] for d in body["devices"])


def test_tabs_opening_at_once_share_one_whole_window_answer():
    from concurrent.futures import ThreadPoolExecutor

    from gpu_widgets.backends import SimulatedBackend
    from gpu_widgets.service.service import GpuService

    service = GpuService(backend=SimulatedBackend(n_gpus=2, seed=1), interval_s=0.1, window_s=60.0)
    service.start_in_background()
    assert service.wait_ready(30)
    service.stop()  # ticks by hand from here on
    for _ in range(30):
        service.sampler.tick()
    n = len(service.sampler.history)
    made = []
    answers = service.samples
    history = answers.history
    answers.history = lambda since, max_points, until=None: made.append((since, max_points)) or history(since, max_points, until)

    with ThreadPoolExecutor(8) as pool:  # 16 tabs opening at the same moment
        bodies = list(pool.map(lambda _: answers.json(None, 100), range(16)))
    assert len(set(bodies)) == 1 and len(made) == 1
    body = json.loads(bodies[0])
    assert "server_time" not in body and len(body["timestamps"]) == n and "unavailable" in body["devices"][0]
    assert answers.json(0.0, 100) == bodies[0] and len(made) == 1  # since before the oldest sample
    assert json.loads(answers.json(None, 10))["timestamps"] != body["timestamps"] and len(made) == 2

    service.sampler.tick()  # a new sample: the next whole-window answer is made afresh
    assert len(json.loads(answers.json(None, 100))["timestamps"]) == n + 1 and len(made) == 3
    # An increment (since inside the window) is made once per sample for the samples it covers:
    # tabs polling with their own since share it; the next sample makes it afresh.
    since = body["timestamps"][-3]
    for _ in range(2):
        assert len(json.loads(answers.json(since, 100))["timestamps"]) == 3
    assert len(made) == 4
    assert len(json.loads(answers.json(since + 1e-6, 100))["timestamps"]) == 3 and len(made) == 4
    assert len(json.loads(answers.json(since, 10))["timestamps"]) == 3 and len(made) == 5  # other max_points
    service.sampler.tick()
    assert len(json.loads(answers.json(since, 100))["timestamps"]) == 4 and len(made) == 6
