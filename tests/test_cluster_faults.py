"""Prometheus answers that are valid HTTP but not what was asked (issue 22): a misbehaving proxy.

A small fake Prometheus serves crafted JSON (real Prometheus never sends it); the Jupyter server
runs in process with auth on and is asked through real HTTP. Every such answer is
``status: "error"`` with a reason naming what was wrong, never an HTTP 500; failures are cached
for the refresh like successes; an answer over ``cluster_max_answer_mb`` is cut off and the
server's loop keeps serving meanwhile. The shape checks and the sanity checks are also tested on
their functions with crafted JSON.
"""
from __future__ import annotations

import asyncio
import json
import resource
import threading
import time
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import pytest
from tornado.httpclient import HTTPClientError

from gpu_widgets.cluster import answers, detail, overview, pages, promql

from .api_schema import validate_response
from .lab_server import free_port

T = 1_700_000_000.0
OK_TARGETS = {"status": "success", "data": {"activeTargets": []}}


def vector(result: Any) -> dict[str, Any]:
    return {"status": "success", "data": {"resultType": "vector", "result": result}}


def sample(stat: str, value: Any = "1", host: Any = "h", **labels: Any) -> dict[str, Any]:
    return {"metric": {"Hostname": host, "gw_stat": stat, **labels}, "value": [T, value]}


# name -> (query answer, targets answer, words the reason must have)
BAD_ANSWERS: dict[str, tuple[Any, Any, list[str]]] = {
    "result-not-a-list": (vector({"a": 1}), OK_TARGETS, ["data.result is an object, not a list"]),
    "scalar-value": (vector([{"metric": {}, "value": 3}]), OK_TARGETS, ["result[0].value is a number"]),
    "list-metric": (vector([{"metric": ["Hostname"], "value": [T, "1"]}]), OK_TARGETS,
                    ["result[0].metric is a list, not an object"]),
    "non-string-label": (vector([sample("gpus", host=["h"])]), OK_TARGETS,
                         ["label 'Hostname' is a list, not a string"]),
    "number-as-value": (vector([sample("gpus", value=2)]), OK_TARGETS, ["has a value that is a number"]),
    "bad-active-targets": (vector([sample("gpus")]), {"status": "success", "data": {"activeTargets": {"x": 1}}},
                           ["activeTargets is an object, not a list"]),
    "bad-target-interval": (vector([sample("gpus")]),
                            {"status": "success", "data": {"activeTargets": [{"labels": {}, "scrapeInterval": 15}]}},
                            ["activeTargets[0].scrapeInterval is a number"]),
    "matrix-not-vector": ({"status": "success", "data": {"resultType": "matrix", "result": []}}, OK_TARGETS,
                          ["'matrix', wanted a vector"]),
    "deeply-nested": ('{"status":"success","data":{"resultType":"vector","result":[' + "[" * 200_000 + "]" * 200_000
                      + "]}}", OK_TARGETS, ["nested too deeply"]),
}


class FakeProm:
    """Answers /api/v1/query(_range) and /api/v1/targets with what ``answers[prefix]`` holds; under
    /huge a 62 MB answer (with its length), under /endless a body that never ends."""

    def __init__(self) -> None:
        self.port = free_port()
        self.answers: dict[str, tuple[Any, Any]] = {}
        self.asked: dict[str, int] = {}
        self.endless_sent = 0
        fake = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def _send(self, body: bytes, length: bool = True) -> None:
                self.send_response(200)
                self.send_header("Content-Type", "application/json")
                if length:
                    self.send_header("Content-Length", str(len(body)))
                else:
                    self.send_header("Connection", "close")
                self.end_headers()
                self.wfile.write(body)

            def _answer(self) -> None:
                prefix = self.path.split("/")[1]
                fake.asked[prefix] = fake.asked.get(prefix, 0) + 1
                if length := int(self.headers.get("Content-Length") or 0):
                    self.rfile.read(length)
                try:
                    if prefix == "huge":
                        self.send_response(200)
                        self.send_header("Content-Length", str(62_000_000))
                        self.end_headers()
                        self.wfile.write(b'{"status":"success","data":{"resultType":"vector","result":[' + b" " * 62_000_000)
                    elif prefix == "endless":
                        self._send(b'{"status":"success","data":{"resultType":"vector","result":[', length=False)
                        while True:
                            self.wfile.write(b'{"metric":{},"value":[1,"1"]},' * 2000)
                            fake.endless_sent += 1
                    else:
                        query, targets = fake.answers[prefix]
                        body = targets if "/targets" in self.path else query
                        self._send((body if isinstance(body, str) else json.dumps(body)).encode())
                except (BrokenPipeError, ConnectionResetError):
                    pass  # the client stopped reading: what it should do

            do_GET = do_POST = _answer  # noqa: N815 - http.server's names

            def log_message(self, *args: Any) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", self.port), Handler)
        self.server.daemon_threads = True
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()


FAKE = FakeProm()
for _name, (_query, _targets, _words) in BAD_ANSWERS.items():
    FAKE.answers[_name] = (_query, _targets)


@pytest.fixture(scope="module", autouse=True)
def _close_fake() -> Iterator[None]:
    yield
    FAKE.close()


def _config(prefix: str, **more: Any) -> dict[str, Any]:
    return {"backend": "simulated", "prometheus_url": f"http://127.0.0.1:{FAKE.port}/{prefix}",
            "cluster_refresh_s": 30, **more}


async def _get(jp_fetch: Any, **params: str) -> dict[str, Any]:
    response = await jp_fetch("gpu-widgets", "api", "v1", "cluster", params=params)
    assert response.code == 200
    body = json.loads(response.body)
    validate_response("/cluster", body)
    return body


@pytest.mark.parametrize(("gw_config", "words"), [(_config(name), words) for name, (_, _, words) in BAD_ANSWERS.items()],
                         ids=list(BAD_ANSWERS))
async def test_an_answer_not_of_the_shape_asked_is_an_error_that_says_what(jp_fetch: Any, gw_config: dict,
                                                                           words: list[str]) -> None:
    prefix = gw_config["prometheus_url"].rsplit("/", 1)[1]
    # Given a "Prometheus" that answers JSON of the wrong shape, when the overview and a detail are asked
    body = await _get(jp_fetch)
    # then each is status error with a reason that names what was wrong (never an HTTP 500)
    assert body["status"] == "error" and body["hosts"] == [], body
    for word in words:
        assert word in body["reason"], body["reason"]
    assert "cannot use" in body["reason"] and gw_config["prometheus_url"] in body["reason"]
    host = await _get(jp_fetch, host="h")
    # (the fake answers the detail's range query with the same vector: an error as well)
    assert host["status"] == "error" and host["gpus"] == [] and "cannot use" in host["reason"], host
    # and the failure is kept for the refresh like an answer: asking again does not ask Prometheus again
    await asyncio.sleep(0.5)  # a request of the round still in flight (the targets') lands first
    asked = FAKE.asked[prefix]
    for _ in range(3):
        assert await _get(jp_fetch) == body
    await asyncio.sleep(0.5)
    assert FAKE.asked[prefix] == asked


# -- many hosts: pages ------------------------------------------------------------------------------
MANY = 1234


def _many_hosts() -> list[dict[str, Any]]:
    """MANY hosts named Rack<r>-node-<i> (mixed case); every 10th stale; power rising with i."""
    out = []
    for i in range(MANY):
        host = f"Rack{i % 7}-node-{i:04d}"
        out += [sample("gpus", "8", host=host), sample("busy", str(i % 9 and 2), host=host),
                sample("free", str(8 - (i % 9 and 2)), host=host), sample("power_w", str(100 + i), host=host)]
        if i % 10 != 9:
            out.append(sample("age_live", "1", host=host))
    return out


FAKE.answers["many"] = (vector(_many_hosts()), OK_TARGETS)


def _names(body: dict[str, Any]) -> list[str]:
    return [row[0] for row in body["hosts"]]


@pytest.mark.parametrize("gw_config", [_config("many")])
async def test_every_host_is_found_page_by_page_from_one_round(jp_fetch: Any) -> None:
    # Given a Prometheus with 1234 hosts, when the panel asks the first page
    first = await _get(jp_fetch)
    assert first["status"] == "ok" and first["matched_hosts"] == MANY and first["totals"]["hosts"] == MANY
    assert len(first["hosts"]) == 100 and first["offset"] == 0 and first["limit"] == 100
    await asyncio.sleep(0.5)  # the round's last request lands
    asked = FAKE.asked["many"]
    # then paging through gives every host once, in name order, each page within the budget
    seen, offset = [], 0
    while offset < MANY:
        body = await _get(jp_fetch, offset=str(offset))
        assert len(json.dumps(body["hosts"], separators=(",", ":"))) <= 48_000 and body["offset"] == offset
        seen += _names(body)
        offset += len(body["hosts"])
    assert seen == sorted(f"Rack{i % 7}-node-{i:04d}" for i in range(MANY))
    # and a host past the first page is found by its name, in any case
    found = await _get(jp_fetch, filter="  rack3-NODE-1200 ")
    assert _names(found) == ["Rack3-node-1200"] and found["matched_hosts"] == 1
    assert found["totals"]["hosts"] == MANY  # the totals still count every host
    words = await _get(jp_fetch, filter="node-12 rack0")
    assert _names(words) == [f"Rack0-node-{i:04d}" for i in range(1200, 1234) if i % 7 == 0]
    assert (await _get(jp_fetch, filter="no-such-host"))["hosts"] == []
    # and however many pages were asked, Prometheus was not asked again within the refresh
    assert FAKE.asked["many"] == asked


@pytest.mark.parametrize("gw_config", [_config("many")])
async def test_pages_are_sorted_and_filtered_on_the_server(jp_fetch: Any) -> None:
    power = (await _get(jp_fetch, sort="power", descending="1"))["hosts"]
    values = [row[12] for row in power]
    assert values == sorted(values, reverse=True) and values[0] == 100 + MANY - 1
    # stale hosts' readings say nothing about now: they come last, in either direction
    last = await _get(jp_fetch, sort="power", descending="1", offset=str(MANY - 5))
    assert all(row[2] for row in last["hosts"]) and len(last["hosts"]) == 5
    up = await _get(jp_fetch, sort="power", limit="3")
    assert [row[12] for row in up["hosts"]] == [100, 101, 102]
    down = await _get(jp_fetch, sort="host", descending="true", limit="2")
    assert _names(down) == sorted((f"Rack{i % 7}-node-{i:04d}" for i in range(MANY)), reverse=True)[:2]
    stale = await _get(jp_fetch, activity="stale")
    assert stale["matched_hosts"] == MANY // 10 and all(row[2] for row in stale["hosts"])
    busy = await _get(jp_fetch, activity="busy", limit="100")
    assert busy["matched_hosts"] == sum(1 for i in range(MANY) if i % 10 != 9 and i % 9)
    assert all(row[5] and not row[2] for row in busy["hosts"])
    free = await _get(jp_fetch, activity="free", filter="rack1")
    assert free["matched_hosts"] == sum(1 for i in range(MANY) if i % 10 != 9 and i % 7 == 1)
    # past the end (hosts went away since the panel asked): the last page, saying where it starts
    end = await _get(jp_fetch, offset="99999")
    assert end["offset"] == MANY - 100 and len(end["hosts"]) == 100


@pytest.mark.parametrize("gw_config", [_config("many")])
@pytest.mark.parametrize(("params", "words"), [
    ({"sort": "name"}, "sort: expected one of host, gpus, busy"),
    ({"activity": "idle"}, "activity: expected one of all, busy, free, stale"),
    ({"offset": "-1"}, "offset: expected a whole number from 0 to 10000000"),
    ({"offset": "1.5"}, "offset: expected a whole number"),
    ({"limit": "101"}, "limit: expected a whole number from 1 to 100, got 101"),
    ({"limit": "0"}, "limit: expected a whole number from 1 to 100"),
    ({"descending": "yes"}, "descending: expected 1 or 0"),
    ({"filter": "x" * 1025}, "filter: expected at most 1024 characters, got 1025"),
    ({"host": "h", "offset": "0"}, "offset: only for the overview, not with host"),
])
async def test_a_bad_page_parameter_is_a_400_that_names_it(jp_fetch: Any, params: dict[str, str], words: str) -> None:
    with pytest.raises(HTTPClientError) as err:
        await jp_fetch("gpu-widgets", "api", "v1", "cluster", params=params)
    assert err.value.code == 400
    body = json.loads(err.value.response.body)
    validate_response("error", body)
    assert words in body["message"], body


@pytest.mark.parametrize("gw_config", [_config("huge")])
async def test_an_answer_over_the_size_limit_is_refused_by_its_length(jp_fetch: Any) -> None:
    body = await _get(jp_fetch)
    assert body["status"] == "error" and body["hosts"] == []
    assert "answer too large: 62.0 MB, over the 16 MB limit (GpuWidgets.cluster_max_answer_mb)" in body["reason"]


@pytest.mark.parametrize("gw_config", [_config("endless", prometheus_timeout_s=60)])
async def test_an_endless_answer_is_cut_off_while_the_server_keeps_serving(jp_fetch: Any) -> None:
    peak_before_kib = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    # Given an answer that never ends, when the overview is asked, the server still answers others
    cluster = asyncio.ensure_future(_get(jp_fetch))
    waits = []
    while not cluster.done():
        start = time.monotonic()
        await jp_fetch("api", "status")
        waits.append(time.monotonic() - start)
        await asyncio.sleep(0.01)
    body = cluster.result()
    # then it is refused once over the limit (not after the 60 s timeout), memory bounded
    assert body["status"] == "error" and "answer too large: more than 16 MB" in body["reason"], body
    assert FAKE.endless_sent * 60_000 < 200_000_000  # it stopped reading: the sender was stopped too
    grown_mb = (resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - peak_before_kib) / 1024
    assert grown_mb < 200, f"the peak memory grew {grown_mb:.0f} MB for a 16 MB limit"
    # and /api/status kept answering meanwhile (a deadline with a wide margin, not a timing)
    assert waits and max(waits) < 2.0, waits


@pytest.mark.parametrize("gw_config", [_config("endless", cluster_max_answer_mb=0)])
async def test_a_bad_size_limit_names_the_setting(jp_fetch: Any) -> None:
    body = await _get(jp_fetch)
    assert body["status"] == "error" and "GpuWidgets.cluster_max_answer_mb must be within 0-100 MB" in body["reason"]


# -- the functions, with crafted JSON ---------------------------------------------------------------
@pytest.mark.parametrize(("data", "words"), [
    ({"resultType": "vector", "result": [{"metric": {}, "value": [float("inf"), "1"]}]}, "not a finite number"),
    ({"resultType": "vector", "result": [{"metric": {}, "value": [T]}]}, "not a [time, \"value\"] pair"),
    ({"resultType": "vector", "result": ["x"]}, "result[0] is a string, not an object"),
    (None, "of type 'None', wanted a vector"),
])
def test_result_shapes_are_checked(data: Any, words: str) -> None:
    with pytest.raises(answers.BadAnswer, match=words.replace("[", r"\[").replace("(", r"\(")):
        answers.result(data, "vector")


def test_matrix_points_are_checked() -> None:
    data = {"resultType": "matrix", "result": [{"metric": {}, "values": [[T, "1"], [T, None]]}]}
    with pytest.raises(answers.BadAnswer, match=r"result\[0\].values\[1\] has a value that is null"):
        answers.result(data, "matrix")


def test_implausible_aggregates_are_unknown_and_not_counted() -> None:
    result = [sample("gpus", "2"), sample("util_mean", "140"), sample("util_max", "-3"), sample("temp_max", "250"),
              sample("mem_used_mib", "-5"), sample("mem_total_mib", "1e305"), sample("power_w", "1e9"),
              sample("busy", "7"), sample("free", "-1"), sample("age_live", "1")]
    body = overview.build(result, {}, "h")
    row = dict(zip(body["host_columns"], body["hosts"][0]))
    assert [row[k] for k in ("utilization_mean_percent", "utilization_max_percent", "temperature_max_c",
                             "memory_used_gib", "memory_total_gib", "power_w")] == [None] * 6
    assert row["busy_gpus"] == 2 and row["free_gpus"] == 0  # never more busy GPUs than GPUs
    json.dumps(body, allow_nan=False)


def test_gpu_values_that_overflow_once_scaled_are_unknown() -> None:
    labels = {"Hostname": "h", "UUID": "GPU-1", "gpu": "²"}
    result = [{"metric": {**labels, "gw_stat": stat}, "value": [T, value]}
              for stat, value in (("used", "1e305"), ("free", "1e305"), ("util", "50"), ("temp", "-51"))]
    gpus = detail.gpus_of(result, 3)
    assert gpus["GPU-1"]["memory_used_bytes"] is None and gpus["GPU-1"]["memory_total_bytes"] is None
    assert gpus["GPU-1"]["utilization_gpu_percent"] == 50 and gpus["GPU-1"]["temperature_c"] is None
    assert detail.finish({"gpus_by_key": gpus})["gpus"][0]["gpu"] == "²"  # a "digit" int() refuses: sorted last


def test_host_names_are_quoted_as_promql_takes_them() -> None:
    assert promql.quote("a\U0001F600") == '"a\U0001F600"'  # UTF-8, not a \\ud83d\\ude00 surrogate pair
    assert promql.quote(' "x"\\\t\x01') == '" \\"x\\"\\\\\\u0009\\u0001"'
    assert "\\ud83d" not in promql.detail_query("a\U0001F600", 1) + promql.history_query("a\U0001F600", 15)


def test_the_overview_sent_to_the_sidebar_fits_its_budget_with_totals_over_every_host() -> None:
    # Given 5000 hosts with 1024-character names (each row ~1,100 bytes: 100 would be 110 KB)
    names = [f"{i:05d}-" + "n" * 1018 for i in range(5000)]
    result = [s for n in names for s in (sample("gpus", "8", host=n), sample("busy", "8", host=n),
                                         sample("age_live", "1", host=n))]
    body = overview.build(result, {}, names[4321])
    assert len(body["hosts"]) == 5000 and body["unlisted_hosts"] == 0 and body["unlisted_reason"] is None
    # when pages are cut from it, each fits the budget and says where the next one starts
    offset, seen = 0, []
    while offset < 5000:
        got = pages.page(body, pages.PageQuery(offset=offset))
        rows = got["hosts"]
        assert 0 < len(rows) <= pages.MAX_PAGE_ROWS
        assert len(json.dumps(rows, separators=(",", ":"))) <= pages.ROWS_BUDGET_BYTES
        assert got["matched_hosts"] == 5000 and got["offset"] == offset
        assert got["totals"]["hosts"] == 5000 and got["totals"]["gpus"] == 40000 and got["totals"]["busy_gpus"] == 40000
        seen += [r[0] for r in rows]
        offset += len(rows)
    # then every host is on exactly one page, in name order
    assert seen == names
