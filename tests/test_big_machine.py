"""A machine with many GPU processes: every answer stays bounded, and nothing is lost.

The fake libnvidia-ml.so.1 reports 120 processes on GPU 0 (its most is 128), 10 on GPU 1 and
none on GPU 2, through the real pynvml and a real Jupyter server with auth on. The sample and
the Prometheus export list each GPU's largest ones and count the rest; ``processes`` pages
through every one of them. (benchmarks/big_machine.py measures 64 GPUs x 1000 processes.)
"""
from __future__ import annotations

import json

import pytest
from prometheus_client.parser import text_string_to_metric_families
from tornado.httpclient import HTTPClientError

from gpu_widgets.export.families import PROCESS_SERIES_MAX
from gpu_widgets.sampling.snapshot import PROCESSES_SHOWN
from gpu_widgets.service.process_pages import MAX_LIMIT, MAX_ROWS

from .api_schema import validate_response
from .test_server_api import PREFIX, get_json, wait_for

MIB = 1 << 20
PID_BASE = 4_300_000  # above Linux's pid_max (2**22): no real process has these pids
MANY, FEW = 120, 10
# GPU 0's processes use 1..120 MiB, in a shuffled pid order: the largest is not the last pid.
GPU0 = [(PID_BASE + (k * 37) % MANY, (k + 1) * MIB) for k in range(MANY)]
GPU1 = [(PID_BASE + 1000 + k, (k + 1) * MIB) for k in range(FEW)]
DRIVER = {"gpus": [{"procs": GPU0}, {"procs": GPU1}, {}]}
SERVER = {"backend": "nvml", "interval_s": 0.1}
BY_MEMORY_0 = [pid for pid, _ in sorted(GPU0, key=lambda p: -p[1])]

pytestmark = pytest.mark.parametrize("gw_config,fake_nvml_config", [(SERVER, DRIVER)])


def ready(body: dict) -> bool:
    devices = body.get("devices") or []
    return len(devices) == 3 and all(d.get("processes") is not None for d in devices)


async def bad(jp_fetch, params) -> str:
    with pytest.raises(HTTPClientError) as info:
        await jp_fetch(*PREFIX, "processes", params=params)
    assert info.value.code == 400
    body = json.loads(info.value.response.body)
    assert body["code"] == "bad_parameter"
    return body["message"]


async def test_a_sample_lists_the_largest_processes_and_counts_the_rest(in_process_fake_nvml, jp_fetch):
    snap = await wait_for(jp_fetch, ready, path=("samples", "latest"))
    validate_response("/samples/latest", snap)
    big, few, none = snap["devices"]
    assert [p["pid"] for p in big["processes"]] == BY_MEMORY_0[:PROCESSES_SHOWN]
    assert big["processes_omitted"] == MANY - PROCESSES_SHOWN
    assert [p["used_memory_bytes"] for p in few["processes"]] == [(k + 1) * MIB for k in reversed(range(FEW))]
    assert few["processes_omitted"] == 0
    assert (none["processes"], none["processes_omitted"]) == ([], 0)
    # Its size does not grow with the processes: GPU 0's 120 weigh as little as 32.
    response = await jp_fetch(*PREFIX, "samples", "latest")
    per_process = len(json.dumps(big["processes"][0]))
    assert len(response.body) < len(json.dumps({**snap, "devices": [none] * 3})) + (PROCESSES_SHOWN + FEW + 4) * per_process


async def test_processes_pages_through_every_process_largest_first(in_process_fake_nvml, jp_fetch):
    first = await wait_for(jp_fetch, ready, path=("processes",))
    validate_response("/processes", first)
    assert (first["offset"], first["limit"]) == (0, 100)
    assert [d["processes_total"] for d in first["devices"]] == [MANY, FEW, 0]
    assert [len(d["processes"]) for d in first["devices"]] == [100, FEW, 0]
    seen: list[int] = []
    for offset in range(0, MANY + 50, 50):
        page = await get_json(jp_fetch, "processes", params={"gpu": "0", "offset": str(offset), "limit": "50"})
        validate_response("/processes", page)
        (dev,) = page["devices"]
        assert dev["index"] == 0 and dev["processes_total"] == MANY and page["limit"] == 50
        seen += [p["pid"] for p in dev["processes"]]
    assert seen == BY_MEMORY_0  # each once, in order, none missing
    # Over every GPU a big limit is lowered so that one answer stays within MAX_ROWS.
    every = await get_json(jp_fetch, "processes", params={"limit": str(MAX_LIMIT)})
    assert every["limit"] == min(MAX_LIMIT, MAX_ROWS // 3)
    # One GPU alone keeps the limit asked.
    one = await get_json(jp_fetch, "processes", params={"gpu": "1", "limit": str(MAX_LIMIT)})
    assert one["limit"] == MAX_LIMIT and len(one["devices"][0]["processes"]) == FEW


async def test_paging_parameters_are_strict(in_process_fake_nvml, jp_fetch):
    await wait_for(jp_fetch, ready, path=("processes",))
    assert "limit: expected a whole number from 1 to 1000, got 0" in await bad(jp_fetch, {"limit": "0"})
    assert "limit: expected a whole number from 1 to 1000, got 1001" in await bad(jp_fetch, {"limit": "1001"})
    assert "limit: expected a whole number" in await bad(jp_fetch, {"limit": "all"})
    assert "offset: expected a whole number from 0" in await bad(jp_fetch, {"offset": "-1"})
    assert "offset: expected a whole number" in await bad(jp_fetch, {"offset": "1e3"})
    assert "gpu: no GPU with index 7 (indices: 0, 1, 2)" in await bad(jp_fetch, {"gpu": "7"})
    assert "gpu: expected a whole number" in await bad(jp_fetch, {"gpu": "first"})
    assert "verbose: unknown parameter (valid: offset, limit, gpu)" in await bad(jp_fetch, {"verbose": "1"})
    assert "offset: given more than once" in await bad(jp_fetch, [("offset", "0"), ("offset", "50")])


async def test_the_export_has_series_for_the_largest_and_counts_the_rest(in_process_fake_nvml, jp_fetch):
    await wait_for(jp_fetch, ready, path=("samples", "latest"))
    response = await jp_fetch("gpu-widgets", "metrics")
    families = {f.name: f for f in text_string_to_metric_families(response.body.decode())}
    procs = families["gpu_widgets_process_gpu_memory_bytes"].samples
    by_gpu = {g: [int(s.labels["pid"]) for s in procs if s.labels["gpu"] == g] for g in ("0", "1", "2")}
    assert by_gpu == {"0": BY_MEMORY_0[:PROCESS_SERIES_MAX], "1": [PID_BASE + 1000 + k for k in reversed(range(FEW))],
                      "2": []}
    omitted = {s.labels["gpu"]: s.value for s in families["gpu_widgets_process_series_omitted"].samples}
    assert omitted == {"0": MANY - PROCESS_SERIES_MAX, "1": 0, "2": 0}


async def test_sidebars_asking_for_the_same_page_together_share_one_answer(in_process_fake_nvml, jp_fetch, jp_serverapp):
    import asyncio

    await wait_for(jp_fetch, ready, path=("processes",))
    shared = jp_serverapp.web_app.settings["gpu_widgets_service"].pages_shared
    before = shared.made
    bodies = await asyncio.gather(*(get_json(jp_fetch, "processes", params={"limit": "40"}) for _ in range(8)))
    # One sample lasts 0.1 s here: eight requests at once span one or two of them, never eight.
    assert shared.made - before <= 2
    assert all(b["limit"] == 40 and [d["processes_total"] for d in b["devices"]] == [MANY, FEW, 0] for b in bodies)
    other = await get_json(jp_fetch, "processes", params={"limit": "40", "offset": "40"})  # another page: its own
    assert [p["pid"] for p in other["devices"][0]["processes"]] == BY_MEMORY_0[40:80]
