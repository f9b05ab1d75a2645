"""The cluster view against Debian's real prometheus scraping a target with odd hosts (issue 22).

One target exposes dcgm-exporter's names for hosts that used to go missing or not open: current
dcgm-exporter's ``hostname`` label (and a target sending both spellings), a host name with an
emoji, spaces and a tab around it, a control character and a newline, 300 characters; GPUs with
implausible readings; one GPU listed twice under one UUID. Every host the overview lists must
open, with the same GPU count, through real HTTP with auth on.
"""
from __future__ import annotations

import json
import time
from collections.abc import Iterator
from typing import Any

import pytest

from .api_schema import validate_response
from .lab_server import free_port
from .prometheus_fixture import Prometheus, TextTarget, exposition_line, require_prometheus, static_scrape_config

UTIL, USED, FREE, TEMP, POWER = ("DCGM_FI_DEV_GPU_UTIL", "DCGM_FI_DEV_FB_USED", "DCGM_FI_DEV_FB_FREE",
                                 "DCGM_FI_DEV_GPU_TEMP", "DCGM_FI_DEV_POWER_USAGE")
EMOJI = "gpu-\U0001F600-node"  # past U+FFFF: JSON writes it as a surrogate pair, which PromQL refuses
SPACED = " spaced\t"
CONTROL = "ctl\x01line\nbreak"
LONG = "l" * 300
NORMAL = {UTIL: 50, USED: 1000, FREE: 80000, TEMP: 40, POWER: 300}


def gpu(host_labels: dict[str, str], index: int, uuid: str, **values: float) -> list[str]:
    labels = {"gpu": str(index), "UUID": uuid, "modelName": "NVIDIA H100 80GB HBM3", **host_labels}
    return [exposition_line(metric, labels, value) for metric, value in {**NORMAL, **values}.items()]


def lines(without: tuple[str, ...] = ()) -> list[str]:
    hosts: dict[str, list[str]] = {
        "dcgm-new": gpu({"hostname": "dcgm-new"}, 0, "GPU-new-0") + gpu({"hostname": "dcgm-new"}, 1, "GPU-new-1"),
        "both-labels": gpu({"Hostname": "both-labels", "hostname": "both-labels"}, 0, "GPU-both-0"),
        EMOJI: gpu({"Hostname": EMOJI}, 0, "GPU-emoji-0"),
        SPACED: gpu({"Hostname": SPACED}, 0, "GPU-spaced-0"),
        CONTROL: gpu({"Hostname": CONTROL}, 0, "GPU-control-0"),
        LONG: gpu({"Hostname": LONG}, 0, "GPU-long-0"),
        # gpu 0: every reading out of range; gpu 1: memory that overflows once scaled to bytes
        "insane": gpu({"Hostname": "insane"}, 0, "GPU-insane-0", **{UTIL: 150, TEMP: 250, USED: -5, POWER: -1})
        + gpu({"Hostname": "insane"}, 1, "GPU-insane-1", **{UTIL: 5, USED: 1e305, TEMP: -60}),
        # one GPU under two indexes (a confused exporter): one GPU in the overview and in the detail
        "dup-uuid": gpu({"Hostname": "dup-uuid"}, 0, "GPU-dup") + gpu({"Hostname": "dup-uuid"}, 1, "GPU-dup"),
    }
    return [line for host, host_lines in hosts.items() if host not in without for line in host_lines]


EXPECTED_GPUS = {"dcgm-new": 2, "both-labels": 1, EMOJI: 1, SPACED: 1, CONTROL: 1, LONG: 1, "insane": 2, "dup-uuid": 1}
PORT = free_port()
CONFIG = {"backend": "simulated", "prometheus_url": f"http://127.0.0.1:{PORT}", "cluster_refresh_s": 1}


@pytest.fixture(scope="module")
def odd() -> Iterator[tuple[Prometheus, TextTarget]]:
    require_prometheus()
    with TextTarget(lines()) as target:
        with Prometheus([static_scrape_config("odd", target.port, 1.0)], port=PORT) as prom:
            prom.wait_for_series(UTIL, count=len(lines()) // len(NORMAL))
            yield prom, target


async def _get(jp_fetch: Any, **params: str) -> dict[str, Any]:
    response = await jp_fetch("gpu-widgets", "api", "v1", "cluster", params=params)
    assert response.code == 200
    body = json.loads(response.body)
    validate_response("/cluster", body)
    return body


async def _wait(jp_fetch: Any, ready: Any, timeout_s: float = 30, **params: str) -> dict[str, Any]:
    deadline = time.monotonic() + timeout_s
    while True:
        body = await _get(jp_fetch, **params)
        if ready(body):
            return body
        assert time.monotonic() < deadline, f"never got there: {json.dumps(body)[:2000]}"
        await _sleep(0.3)


async def _sleep(s: float) -> None:
    import asyncio

    await asyncio.sleep(s)


def _rows(body: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return {row[0]: dict(zip(body["host_columns"], row)) for row in body["hosts"]}


@pytest.mark.parametrize("gw_config", [CONFIG])
async def test_every_host_the_overview_lists_opens_with_the_same_gpus(odd: Any, jp_fetch: Any) -> None:
    # Given Prometheus holds the odd hosts, when the overview is asked
    body = await _wait(jp_fetch, lambda b: len(b["hosts"]) == len(EXPECTED_GPUS))
    # then each is listed once, by its exact name, with its GPUs counted once
    rows = _rows(body)
    assert body["status"] == "ok" and body["unlisted_hosts"] == 0
    assert {h: r["gpu_count"] for h, r in rows.items()} == EXPECTED_GPUS
    assert body["totals"]["hosts"] == len(EXPECTED_GPUS) and body["totals"]["gpus"] == sum(EXPECTED_GPUS.values())
    # and implausible readings are unknown, not counted (a negative memory does not make a GPU free)
    insane = rows["insane"]
    assert insane["utilization_mean_percent"] == 5 and insane["utilization_max_percent"] == 5
    assert insane["temperature_max_c"] is None and insane["memory_used_gib"] is None and insane["power_w"] == 300
    assert insane["busy_gpus"] == 0 and insane["free_gpus"] == 0
    # and every listed host opens, with as many GPUs as the overview counted
    for host, row in rows.items():
        detail = await _get(jp_fetch, host=host)
        assert detail["status"] == "ok" and detail["hostname"] == host, host
        assert len(detail["gpus"]) == row["gpu_count"], (host, detail["gpus"])
    gpus = {g["uuid"]: g for g in (await _get(jp_fetch, host="insane"))["gpus"]}
    assert [gpus["GPU-insane-0"][k] for k in ("utilization_gpu_percent", "temperature_c", "memory_used_bytes",
                                              "power_w")] == [None, None, None, None]
    assert gpus["GPU-insane-1"]["memory_used_bytes"] is None and gpus["GPU-insane-1"]["memory_total_bytes"] is None
    assert gpus["GPU-insane-1"]["temperature_c"] is None and gpus["GPU-insane-1"]["utilization_gpu_percent"] == 5
    history = gpus["GPU-insane-1"]["history"]["memory_used_bytes"]
    assert all(v is None for v in history)  # the history is checked too


@pytest.mark.parametrize("gw_config", [CONFIG])
async def test_a_host_with_an_emoji_that_stops_reporting_stays_listed_and_opens(odd: Any, jp_fetch: Any) -> None:
    prom, target = odd
    await _wait(jp_fetch, lambda b: EMOJI in _rows(b) and not _rows(b)[EMOJI]["stale"])
    # When the emoji host's series vanish from the target (Prometheus marks them stale)
    target.lines = lines(without=(EMOJI, SPACED))
    # then the overview still answers (the second query names the gone hosts), the hosts stale
    body = await _wait(jp_fetch, lambda b: b["status"] != "ok" or _rows(b)[EMOJI]["stale"])
    assert body["status"] == "ok", body["reason"]
    rows = _rows(body)
    assert rows[EMOJI]["stale"] and rows[SPACED]["stale"] and not rows["dcgm-new"]["stale"]
    assert rows[EMOJI]["age_s"] is not None  # dated by the query that carries its name
    for host in (EMOJI, SPACED):
        detail = await _wait(jp_fetch, lambda d: d["stale"] is not None, host=host)
        assert detail["status"] == "ok" and detail["stale"] is True and len(detail["gpus"]) == 1, detail
