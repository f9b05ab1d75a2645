"""The cluster API (issue 14), proven with Debian's real prometheus scraping two real Jupyter servers.

Two ``jupyter lab`` servers with simulated GPUs are two hosts (``c.GpuWidgets.hostname`` node-a and
node-b, different seeds); Prometheus scrapes each one's ``/gpu-widgets/metrics`` every second with
its token; node-a's Cluster view reads Prometheus back. The in-process tests at the end need no
Prometheus: not configured, auth, bad parameters and settings, and Prometheus failures faked by a
tiny HTTP server (refused, not Prometheus, too slow).
"""
from __future__ import annotations

import json
import re
import threading
import time
import urllib.error
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import pytest
from tornado.httpclient import HTTPClientError

from gpu_widgets.cluster import promql
from gpu_widgets.server.app import GpuWidgets

from .api_schema import validate_response
from .lab_server import LabServer, free_port
from .prometheus_fixture import (Prometheus, SyntheticTarget, gpu_host, jupyter_scrape_config, require_prometheus,
                                 static_scrape_config, synthetic_hostname)

DCGM_NAMES = {"DCGM_FI_DEV_GPU_UTIL", "DCGM_FI_DEV_MEM_COPY_UTIL", "DCGM_FI_DEV_FB_USED", "DCGM_FI_DEV_FB_FREE",
              "DCGM_FI_DEV_GPU_TEMP", "DCGM_FI_DEV_POWER_USAGE", "DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION",
              "DCGM_FI_DEV_SM_CLOCK", "DCGM_FI_DEV_MEM_CLOCK"}
DCGM_LABELS = {"gpu", "UUID", "pci_bus_id", "device", "modelName", "Hostname"}
GPUS = {"node-a": 2, "node-b": 3}
GIB = 1 << 30
MIB = 1 << 20
SCRAPE_S = 1.0
# Deadlines, not timings: wide margins for a loaded 2-core CI machine.
STALE_DEADLINE_S = 2 * SCRAPE_S + 13


class Cluster:
    def __init__(self) -> None:
        self.prom = Prometheus()
        self.a = gpu_host("node-a", gpus=GPUS["node-a"], seed=1, prometheus_url=self.prom.url)
        self.b = gpu_host("node-b", gpus=GPUS["node-b"], seed=2, prometheus_url=self.prom.url)
        for name, server in (("node-a", self.a), ("node-b", self.b)):
            self.prom.add(jupyter_scrape_config(name, server, SCRAPE_S))

    def overview(self) -> dict[str, Any]:
        body = self.a.api("cluster")
        validate_response("/cluster", body)
        return body

    def rows(self, body: dict[str, Any]) -> dict[str, dict[str, Any]]:
        return {row[0]: dict(zip(body["host_columns"], row)) for row in body["hosts"]}

    def wait_overview(self, ready: Any, timeout_s: float = 40) -> dict[str, Any]:
        deadline = time.monotonic() + timeout_s
        while True:
            body = self.overview()
            if ready(body):
                return body
            if time.monotonic() > deadline:
                raise AssertionError(f"the overview never got there: {json.dumps(body)[:1500]}")
            time.sleep(0.3)


def _wait(get: Any, ready: Any, timeout_s: float = 15) -> Any:
    """get() until ready(answer): answers are cached a second, and an old one may come once more."""
    deadline = time.monotonic() + timeout_s
    while not ready(answer := get()):
        assert time.monotonic() < deadline, f"never got there: {json.dumps(answer)[:1500]}"
        time.sleep(0.3)
    return answer


@pytest.fixture(scope="module")
def cluster() -> Iterator[Cluster]:
    require_prometheus()
    c = Cluster()
    with ThreadPoolExecutor(2) as pool:  # two servers start faster side by side
        list(pool.map(LabServer.start, (c.a, c.b)))
    try:
        with c.prom:
            c.prom.wait_for_series("DCGM_FI_DEV_GPU_UTIL", count=sum(GPUS.values()))
            yield c
    finally:
        c.a.stop()
        c.b.stop()


@pytest.mark.integration
def test_prometheus_scrapes_both_servers_with_dcgm_names_and_labels(cluster: Cluster) -> None:
    # Given two servers scraped with their tokens, when Prometheus is asked, then every DCGM name is there
    for host, server in (("node-a", cluster.a), ("node-b", cluster.b)):
        series = cluster.prom.api("series", **{"match[]": f'{{__name__=~"DCGM_FI_.*",Hostname="{host}"}}'})
        assert {s["__name__"] for s in series} == DCGM_NAMES
        devices = server.api("devices")["devices"]
        # Prometheus drops a label whose value is empty: the simulated GPUs have no PCI bus id
        labels = DCGM_LABELS if all(d.get("pci_bus_id") for d in devices) else DCGM_LABELS - {"pci_bus_id"}
        for s in series:
            assert labels <= set(s), s
            assert s["modelName"] == "Simulated NVIDIA H100 80GB HBM3" and s["Hostname"] == host
        uuids = {d["uuid"] for d in devices}
        assert {s["UUID"] for s in series} == uuids and len(uuids) == GPUS[host]
    # and a host name with PromQL's and RE2's special characters is quoted so that Prometheus parses it
    query = promql.gone_ages_query(["node-b", 'a.b c"d\\', "é—x|y"], SCRAPE_S)
    odd = _wait(lambda: cluster.prom.query(query), lambda r: r)  # a fine step after node-b's first sample
    assert {r["metric"]["Hostname"] for r in odd} == {"node-b"} and "age_fine" in {r["metric"]["gw_stat"] for r in odd}
    # and our own metrics beside them
    health = cluster.prom.query("gpu_widgets_up")
    assert {r["metric"]["job"] for r in health} == {"node-a", "node-b"}


@pytest.mark.integration
def test_overview_lists_both_hosts_and_which_is_current(cluster: Cluster) -> None:
    body = cluster.wait_overview(lambda b: len(b["hosts"]) == 2)
    assert body["status"] == "ok" and body["reason"] is None
    assert body["prometheus_url"] == cluster.prom.url and body["current_host"] == "node-a"
    assert body["scrape_interval_s"] == SCRAPE_S
    rows = cluster.rows(body)
    assert list(rows) == ["node-a", "node-b"]  # sorted by name
    assert rows["node-a"]["current"] is True and rows["node-b"]["current"] is False
    for host, row in rows.items():
        assert row["stale"] is False and 0 <= row["age_s"] <= 2 * SCRAPE_S + 1
        assert row["gpu_count"] == GPUS[host]
        assert row["busy_gpus"] + row["free_gpus"] <= row["gpu_count"]
        assert row["memory_total_gib"] == pytest.approx(80 * GPUS[host], abs=0.1)
        assert 0 <= row["utilization_mean_percent"] <= row["utilization_max_percent"] <= 100
        assert row["simulated"] is True  # both servers' exports say gpu_widgets_info{simulated="true"}
    assert body["totals"] == {"hosts": 2, "gpus": 5, "stale_hosts": 0, "simulated_hosts": 2,
                              "busy_gpus": sum(r["busy_gpus"] for r in rows.values()),
                              "free_gpus": sum(r["free_gpus"] for r in rows.values())}


def _near_local_sample(server: LabServer, uuid: str, field: str, at: float, value: float, tol: float) -> list[float]:
    """The host's own samples of ``field`` taken within 2 s before ``at`` (when Prometheus scraped):
    the exported value must be one of them. Returns them (for the failure message) after checking."""
    local = server.api("samples", since=at - 10)
    dev = next(d for d in local["devices"] if d["uuid"] == uuid)
    near = [v for t, v in zip(local["timestamps"], dev[field]) if at - 2.0 <= t <= at + 0.1 and v is not None]
    assert near, f"{field}: no local sample near {at}"
    assert any(abs(v - value) <= tol for v in near), f"{field}: {value} from Prometheus, the host had {near}"
    return near


@pytest.mark.integration
@pytest.mark.parametrize("host", ["node-a", "node-b"])
def test_host_detail_has_the_values_the_simulated_gpus_produced(cluster: Cluster, host: str) -> None:
    server = cluster.a if host == "node-a" else cluster.b
    body = cluster.a.api("cluster", host=host)
    validate_response("/cluster", body)
    assert body["status"] == "ok" and body["hostname"] == host and body["current"] is (host == "node-a")
    assert body["stale"] is False and body["history_step_s"] == 15.0 and body["simulated"] is True
    devices = {d["uuid"]: d for d in server.api("devices")["devices"]}
    assert [g["uuid"] for g in body["gpus"]] == [d["uuid"] for d in sorted(devices.values(), key=lambda d: d["index"])]
    scraped_at = time.time() - body["age_s"]  # Prometheus's sample time (same clock here)
    for gpu in body["gpus"]:
        dev = devices[gpu["uuid"]]
        assert gpu["gpu"] == str(dev["index"]) and gpu["model"] == dev["name"]
        assert gpu["memory_total_bytes"] == pytest.approx(dev["memory_total_bytes"], abs=2 * MIB)
        _near_local_sample(server, gpu["uuid"], "utilization_gpu_percent", scraped_at, gpu["utilization_gpu_percent"], 0.51)
        _near_local_sample(server, gpu["uuid"], "temperature_c", scraped_at, gpu["temperature_c"], 0.051)
        _near_local_sample(server, gpu["uuid"], "power_w", scraped_at, gpu["power_w"], 0.051)
        _near_local_sample(server, gpu["uuid"], "memory_used_bytes", scraped_at, gpu["memory_used_bytes"], MIB)
        history = gpu["history"]
        assert len(history["utilization_gpu_percent"]) == len(history["memory_used_bytes"]) == 40
        assert history["utilization_gpu_percent"][-1] is not None  # the newest step has samples


@pytest.mark.integration
def test_unknown_host_is_a_404_with_a_json_error(cluster: Cluster) -> None:
    with pytest.raises(urllib.error.HTTPError) as err:
        cluster.a.api("cluster", host="node-zz")
    body = json.loads(err.value.read())
    validate_response("error", body)
    assert err.value.code == 404 and body["code"] == "not_found" and "node-zz" in body["message"]


@pytest.mark.integration
def test_a_stopped_host_turns_stale_within_two_scrape_intervals(cluster: Cluster) -> None:
    # Given both hosts current, when node-b's server stops
    cluster.wait_overview(lambda b: not any(r[2] for r in b["hosts"]) and len(b["hosts"]) == 2)
    cluster.b.stop()
    stopped = time.monotonic()
    # then node-b is listed as stale (Prometheus's failed scrape marks its series stale), node-a is not
    body = cluster.wait_overview(lambda b: cluster.rows(b)["node-b"]["stale"], timeout_s=STALE_DEADLINE_S)
    assert time.monotonic() - stopped <= STALE_DEADLINE_S
    rows = cluster.rows(body)
    assert rows["node-a"]["stale"] is False and rows["node-b"]["gpu_count"] == GPUS["node-b"]
    assert rows["node-b"]["simulated"] is True  # its last gpu_widgets_info still says so
    assert rows["node-b"]["utilization_mean_percent"] is None  # no current readings: not made up
    assert rows["node-b"]["age_s"] is not None and 0 < rows["node-b"]["age_s"] <= 60, (body, cluster.a.log_tail())  # dated by the second query
    assert body["totals"]["stale_hosts"] == 1 and body["totals"]["hosts"] == 2
    assert body["totals"]["busy_gpus"] + body["totals"]["free_gpus"] <= GPUS["node-a"]  # stale GPUs not counted
    detail = _wait(lambda: cluster.a.api("cluster", host="node-b"), lambda d: d["stale"])
    assert detail["stale"] is True and len(detail["gpus"]) == GPUS["node-b"] and detail["simulated"] is True


@pytest.mark.integration
def test_prometheus_stopped_is_a_clear_error_while_the_local_sidebar_keeps_working(cluster: Cluster) -> None:
    # Given Prometheus stops, when the cluster view asks it (after the 1 s cache)
    cluster.prom.stop()
    body = cluster.wait_overview(lambda b: b["status"] != "ok", timeout_s=15)
    # then it says so, naming the URL, and lists nothing
    assert body["status"] == "unreachable" and body["hosts"] == []
    assert cluster.prom.url in body["reason"] and "cannot be reached" in body["reason"]
    detail = _wait(lambda: cluster.a.api("cluster", host="node-a"), lambda d: d["status"] != "ok")
    assert detail["status"] == "unreachable" and detail["gpus"] == [] and detail["simulated"] is None
    # and this server's own GPUs are still served, fresh
    latest = cluster.a.api("samples/latest")
    assert latest["status"] == "ok" and len(latest["devices"]) == GPUS["node-a"]


# -- in-process: no Prometheus needed ---------------------------------------------------------------
class FakePrometheus:
    """Not Prometheus: HTML at /html, nothing for 3 s at /slow, a 401 at /locked; under /empty a
    query front end without the targets API (404) whose queries find nothing."""

    def __init__(self) -> None:
        self.port = free_port()
        self.seen_auth: list[str | None] = []

        fake = self

        class Handler(BaseHTTPRequestHandler):
            def _answer(self) -> None:
                fake.seen_auth.append(self.headers.get("Authorization"))
                if self.path.startswith("/slow"):
                    time.sleep(3)
                code, body = (401, b"no") if self.path.startswith("/locked") else (200, b"<html>hello</html>")
                if self.path.startswith("/empty"):
                    code, body = (404, b"404 page not found") if "/targets" in self.path else (
                        200, b'{"status":"success","data":{"resultType":"vector","result":[]}}')
                try:
                    self.send_response(code)
                    self.send_header("Content-Type", "text/html")
                    self.send_header("Content-Length", str(len(body)))
                    self.end_headers()
                    self.wfile.write(body)
                except (BrokenPipeError, ConnectionResetError):
                    pass  # the client gave up waiting (the timeout case)

            do_GET = do_POST = _answer  # noqa: N815 - http.server's names

            def log_message(self, *args: Any) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", self.port), Handler)
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()


FAKE = FakePrometheus()
CLOSED_PORT = free_port()  # nothing listens there


@pytest.fixture(scope="module", autouse=True)
def _close_fake() -> Iterator[None]:
    yield
    FAKE.close()


async def _get(jp_fetch: Any, **params: str) -> dict[str, Any]:
    response = await jp_fetch("gpu-widgets", "api", "v1", "cluster", params=params)
    body = json.loads(response.body)
    validate_response("/cluster", body)
    return body


@pytest.mark.parametrize("gw_config", [{"backend": "simulated"}])
async def test_not_configured_hides_the_view(jp_fetch: Any) -> None:
    body = await _get(jp_fetch)
    assert body["status"] == "not_configured" and body["hosts"] == [] and body["prometheus_url"] is None
    assert "prometheus_url" in body["reason"]
    detail = await _get(jp_fetch, host="node-a")
    assert detail["status"] == "not_configured" and detail["gpus"] == []


@pytest.mark.parametrize("gw_config", [{"backend": "simulated"}])
async def test_cluster_needs_the_token_and_strict_parameters(jp_fetch: Any) -> None:
    for headers, params, code in (({"Authorization": ""}, {}, 403), ({}, {"hosts": "x"}, 400), ({}, {"host": ""}, 400),
                                  ({}, {"host": "x" * 1025}, 400)):
        with pytest.raises(HTTPClientError) as err:
            await jp_fetch("gpu-widgets", "api", "v1", "cluster", params=params, headers=headers)
        assert err.value.code == code
        validate_response("error", json.loads(err.value.response.body))


@pytest.mark.parametrize(("gw_config", "status", "words"), [
    ({"backend": "simulated", "prometheus_url": f"http://alice:s3cret@127.0.0.1:{CLOSED_PORT}"},
     "unreachable", ["cannot be reached", "connection refused"]),
    ({"backend": "simulated", "prometheus_url": f"http://127.0.0.1:{FAKE.port}/html"},
     "error", ["without Prometheus's JSON"]),
    ({"backend": "simulated", "prometheus_url": f"http://127.0.0.1:{FAKE.port}/locked", "prometheus_token": "t0k"},
     "error", ["HTTP 401", "prometheus_token"]),
    ({"backend": "simulated", "prometheus_url": f"http://127.0.0.1:{FAKE.port}/slow", "prometheus_timeout_s": 0.5},
     "unreachable", ["no answer within 0.5 s"]),
    ({"backend": "simulated", "prometheus_url": f"http://127.0.0.1:{FAKE.port}/empty"},
     "ok", ["holds no DCGM_FI_DEV_GPU_UTIL series"]),
], ids=["refused", "not-prometheus", "refused-credentials", "timeout", "no-hosts-no-targets-api"])
async def test_prometheus_failures_are_named_without_credentials(jp_fetch: Any, gw_config: dict, status: str,
                                                                 words: list[str]) -> None:
    body = await _get(jp_fetch)
    assert body["status"] == status and body["hosts"] == []
    assert "s3cret" not in json.dumps(body) and body["prometheus_url"] in body["reason"]
    for word in words:
        assert word in body["reason"]
    if "prometheus_token" in gw_config:
        assert "Bearer t0k" in FAKE.seen_auth


BAD_SETTINGS = [
    ({"prometheus_url": "ftp://alice:s3cret@prom:9090"},
     "GpuWidgets.prometheus_url must start with http:// or https://"),
    ({"prometheus_url": "http://:9090"}, "GpuWidgets.prometheus_url has no host name"),
    ({"prometheus_url": "http://prom:9090/?x=1"}, "GpuWidgets.prometheus_url must not have a query"),
    ({"prometheus_url": "http://[::1:9090"}, "GpuWidgets.prometheus_url is not a URL"),
    ({"prometheus_url": "http://alice:s3 cret@prom:9090"}, "GpuWidgets.prometheus_url must not contain spaces"),
    ({"cluster_refresh_s": 0.1}, "GpuWidgets.cluster_refresh_s must be at least 1"),
    ({"prometheus_timeout_s": 0}, "GpuWidgets.prometheus_timeout_s must be within"),
    ({"prometheus_url": "http://prom:9090", "prometheus_token": "t", "prometheus_username": "u"},
     "choose bearer token or basic auth"),
    ({"prometheus_url": "http://prom:9090", "prometheus_password": "p"}, "prometheus_password is set without"),
]


@pytest.mark.parametrize(("settings", "words"), BAD_SETTINGS)
def test_bad_cluster_settings_say_what_is_wrong(settings: dict, words: str) -> None:
    with pytest.raises(ValueError, match=re.escape(words)):
        GpuWidgets(**settings).cluster_config()


@pytest.mark.parametrize(("gw_config", "words"), [({"backend": "simulated", **settings}, words)
                                                  for settings, words in (BAD_SETTINGS[i] for i in (0, 4, 6, 7))])
async def test_a_bad_cluster_setting_leaves_the_local_sidebar_working(capfd: pytest.CaptureFixture[str],
                                                                      jp_fetch: Any, words: str) -> None:
    # Given a server started with a bad cluster setting (the extension loaded: the request is served)
    # when the Cluster view asks, then it answers an error that names the setting, never the password
    body = await _get(jp_fetch)
    assert body["status"] == "error" and body["hosts"] == [] and body["prometheus_url"] is None
    assert words in body["reason"] and "restarted" in body["reason"] and "s3cret" not in json.dumps(body)
    detail = await _get(jp_fetch, host="node-a")
    assert detail["status"] == "error" and detail["reason"] == body["reason"] and detail["gpus"] == []
    # and this server's own GPUs are served as usual
    latest = json.loads((await jp_fetch("gpu-widgets", "api", "v1", "samples", "latest")).body)
    assert latest["backend"] == "simulated" and latest["status"] in ("ok", "starting")
    # and the server's log said it once, at start (not once per request); capfd is set up before the
    # server, so it holds the whole log (the app's logger writes to stderr and does not propagate)
    logged = [line for line in capfd.readouterr().err.splitlines() if "gpu-widgets cluster view" in line]
    assert len(logged) == 1 and logged[0].startswith("[E ") and words in logged[0], logged
    assert "s3cret" not in logged[0]


# -- NVIDIA's dcgm-exporter: DCGM names, no gpu_widgets_info ---------------------------------------
DCGM_ONLY_PORT = free_port()


@pytest.fixture
def dcgm_only_prometheus() -> Iterator[Prometheus]:
    """A real Prometheus on DCGM_ONLY_PORT scraping a synthetic dcgm-exporter of one host, 2 GPUs."""
    require_prometheus()
    with SyntheticTarget(hosts=1, gpus=2) as target:
        with Prometheus([static_scrape_config("dcgm", target.port, SCRAPE_S)], port=DCGM_ONLY_PORT) as prom:
            prom.wait_for_series("DCGM_FI_DEV_GPU_UTIL", count=2)
            yield prom


@pytest.mark.parametrize("gw_config", [{"backend": "simulated", "prometheus_url": f"http://127.0.0.1:{DCGM_ONLY_PORT}",
                                        "cluster_refresh_s": 1}])
async def test_a_host_without_gpu_widgets_info_is_not_simulated(dcgm_only_prometheus: Prometheus,
                                                                jp_fetch: Any) -> None:
    assert dcgm_only_prometheus.query("gpu_widgets_info") == []  # the exporter has no such series
    body = await _get(jp_fetch)
    rows = {row[0]: dict(zip(body["host_columns"], row)) for row in body["hosts"]}
    host = synthetic_hostname(0)
    assert body["status"] == "ok" and list(rows) == [host] and rows[host]["gpu_count"] == 2
    assert rows[host]["simulated"] is False and body["totals"]["simulated_hosts"] == 0
    detail = await _get(jp_fetch, host=host)
    assert detail["status"] == "ok" and len(detail["gpus"]) == 2 and detail["simulated"] is False
    assert {g["model"] for g in detail["gpus"]} == {"NVIDIA H100 80GB HBM3"}
