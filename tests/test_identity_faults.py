"""A GPU that cannot tell its name or UUID is still a GPU: the fake libnvidia-ml.so.1 makes
nvmlDeviceGetName / nvmlDeviceGetUUID fail or answer bytes that are not UTF-8, under the real
pynvml bindings, the real backend, the CLI and a real Jupyter server."""
from __future__ import annotations

import json
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

from gpu_widgets.backends.base import GPM_OFF
from gpu_widgets.metrics.fields import GPM_FIELDS

from .api_schema import validate_response
from .conftest import run_cli
from .fake_nvml import build_fake_nvml, fake_nvml_env, write_config
from .lab_server import LabServer

pytestmark = pytest.mark.integration  # every test here starts a process

NOT_SUPPORTED, NO_PERMISSION, TIMEOUT, GPU_IS_LOST, UNKNOWN = 3, 4, 10, 15, 999
UUID = [f"GPU-0000000{i}-1111-2222-3333-444444444444" for i in range(3)]


def three_gpus(**errors_by_gpu: dict) -> list[dict]:
    """Three GPUs told apart by their utilization; ``g1={"nvmlDeviceGetName": 3}`` adds errors."""
    gpus = [{"uuid": UUID[i], "name": f"NVIDIA H100 #{i}", "util_gpu": 10 + i} for i in range(3)]
    for key, errors in errors_by_gpu.items():
        gpus[int(key[1:])]["error"] = errors
    return gpus


def snapshot(fake_driver, **env: str) -> dict:
    out = run_cli("snapshot", "--json", "--backend", "nvml", env=fake_driver.env(**env))
    assert out.returncode == 0, out.stderr
    return json.loads(out.stdout)


def info(fake_driver) -> list[dict]:
    out = run_cli("info", "--json", "--backend", "nvml", env=fake_driver.env())
    assert out.returncode == 0, out.stderr
    return json.loads(out.stdout)["devices"]


@pytest.mark.parametrize(
    "code,words", [(NOT_SUPPORTED, "not supported on this GPU"), (NO_PERMISSION, "no permission to read it")]
)
def test_a_gpu_without_name_or_uuid_stays_ok_and_the_others_are_untouched(fake_driver, code, words):
    fake_driver.write({"gpus": three_gpus(g0={"nvmlDeviceGetName": code}, g1={"nvmlDeviceGetUUID": code})})
    # CUDA's order names GPU 2 by UUID, then GPU 0 by index: the unreadable UUIDs must not break it.
    snap = snapshot(fake_driver, CUDA_VISIBLE_DEVICES=f"{UUID[2]},0")
    d0, d1, d2 = snap["devices"]
    assert [d["status"] for d in (d0, d1, d2)] == ["ok", "ok", "ok"]
    assert [d["utilization_gpu_percent"] for d in (d0, d1, d2)] == [10, 11, 12]
    assert d0["processes"] == [] and d0["temperature_c"] == 35  # slow and fast fields both read
    assert (d0["name"], d0["uuid"]) == (None, UUID[0]) and d0["unavailable"] == {"name": words}
    assert (d1["name"], d1["uuid"]) == ("NVIDIA H100 #1", None) and d1["unavailable"] == {"uuid": words}
    assert (d2["name"], d2["uuid"], d2["unavailable"]) == ("NVIDIA H100 #2", UUID[2], {})
    assert snap["cuda_visible_devices"] == [2, 0]

    c0, c1, c2 = info(fake_driver)  # the spec card: read in full, the identity gap named
    assert c0["status"] == "ok" and c0["name"] is None and c0["unavailable"] == {"name": words}
    assert c0["compute_capability"] == "9.0" and c0["memory_bandwidth_bytes_per_s"] > 0
    assert c1["uuid"] is None and c1["unavailable"] == {"uuid": words} and c1["cores"] == 16896
    assert c2["unavailable"] == {}

    table = run_cli("snapshot", "--backend", "nvml", env=fake_driver.env()).stdout
    assert "LOST" not in table and "12%" in table and f"name: {words}" in table


def test_a_name_that_is_not_utf8_shows_with_replacement_characters(fake_driver):
    gpus = three_gpus()
    gpus[1]["name"] = b"NVIDIA \xff\xfe H100 \xe2\x84"  # two stray bytes and a cut-off "™"
    fake_driver.write({"gpus": gpus})
    d0, d1, d2 = snapshot(fake_driver)["devices"]
    assert d1["status"] == "ok" and d1["name"] == "NVIDIA \ufffd\ufffd H100 \ufffd"
    assert d1["uuid"] == UUID[1] and d1["utilization_gpu_percent"] == 11 and d1["unavailable"] == {}
    assert (d0["name"], d2["name"]) == ("NVIDIA H100 #0", "NVIDIA H100 #2")
    assert info(fake_driver)[1]["name"] == "NVIDIA \ufffd\ufffd H100 \ufffd"


@pytest.mark.parametrize("function", ["nvmlDeviceGetName", "nvmlDeviceGetUUID"])
def test_a_gpu_that_stops_answering_is_still_lost(fake_driver, function):
    fake_driver.write({"gpus": three_gpus(g1={function: GPU_IS_LOST})})
    d0, d1, d2 = snapshot(fake_driver)["devices"]
    assert d1["status"] == "lost" and d1["utilization_gpu_percent"] is None
    assert "GPU is lost" in d1["unavailable"]["utilization_gpu_percent"]
    assert (d0["status"], d2["status"]) == ("ok", "ok") and d2["utilization_gpu_percent"] == 12


# Runs the backend in one process, so the fake's call counters show what was asked again.
COUNTING = """
    import ctypes, json, sys
    from tests.fake_nvml import write_config
    from gpu_widgets.backends.nvml.backend import NvmlBackend

    lib = ctypes.CDLL("libnvidia-ml.so.1")
    lib.fakeNvmlCallCount.restype = ctypes.c_ulonglong
    lib.fakeNvmlCallCount.argtypes = [ctypes.c_char_p]
    backend = NvmlBackend()
    backend.open()
    out = {}
    def ticks(label, config=None):
        if config is not None:
            write_config(sys.argv[1], config)
        lib.fakeNvmlResetCallCounts()
        for _ in range(5):
            devices = backend.read_fast(0.0)
        out[label] = {
            "names": [d["name"] for d in devices], "uuids": [d["uuid"] for d in devices],
            "unavailable": [d["unavailable"] for d in devices], "status": [d["status"] for d in devices],
            "name_calls": lib.fakeNvmlCallCount(b"nvmlDeviceGetName"),
            "card": backend.device_info()[0]["name"],
        }
"""


def test_unsupported_identity_is_never_asked_again_and_a_transient_gap_fills_in(fake_driver):
    # GPU 0's name times out at first, GPU 1's is not supported; then GPU 0 answers.
    gpus = three_gpus(g0={"nvmlDeviceGetName": TIMEOUT}, g1={"nvmlDeviceGetName": NOT_SUPPORTED})[:2]
    fake_driver.write({"gpus": gpus})
    body = COUNTING + """
    ticks("timeout")
    ticks("answers", {"gpus": [{k: v for k, v in g.items() if k != "error"} if g["util_gpu"] == 10 else g
                               for g in GPUS]})
    ticks("settled")
    print(json.dumps(out))
    """
    code = textwrap.dedent(body).replace("GPUS", repr(gpus))
    proc = subprocess.run([sys.executable, "-c", code, str(fake_driver.config_path)],
                          env=fake_driver.env(), capture_output=True, text=True, timeout=60,
                          cwd=Path(__file__).resolve().parents[1])
    assert proc.returncode == 0, proc.stderr
    out = json.loads(proc.stdout)
    first, answers, settled = out["timeout"], out["answers"], out["settled"]
    assert first["status"] == ["ok", "ok"] and first["names"] == [None, None]
    assert first["unavailable"] == [{"name": "NVML timed out"}, {"name": "not supported on this GPU"}]
    assert first["name_calls"] == 5  # GPU 0 asked again every tick, GPU 1 never
    assert first["card"] is None
    assert answers["names"] == ["NVIDIA H100 #0", None] and answers["unavailable"][0] == {}
    assert answers["card"] == "NVIDIA H100 #0"  # the spec card learns the name too
    assert settled["name_calls"] == 0  # nothing left to ask
    assert settled["uuids"] == UUID[:2]


def test_the_api_serves_a_gpu_without_name_or_uuid_within_its_schema(fake_nvml_lib, tmp_path):
    config = tmp_path / "nvml.conf"
    write_config(config, {"gpus": three_gpus(g0={"nvmlDeviceGetName": NOT_SUPPORTED},
                                             g1={"nvmlDeviceGetUUID": UNKNOWN})})
    # The server's CUDA_VISIBLE_DEVICES names GPU 1 by the UUID it cannot tell at first.
    env = {**fake_nvml_env(fake_nvml_lib, config), "GPU_WIDGETS_BACKEND": "nvml", "CUDA_VISIBLE_DEVICES": UUID[1]}
    with LabServer(tmp_path, env=env, args=("--GpuWidgets.interval_s=0.2", "--GpuWidgets.slow_interval_s=0.5")) as srv:
        deadline = time.monotonic() + 30
        while not (latest := srv.api("samples/latest"))["devices"] or latest["devices"][0]["processes"] is None:
            assert time.monotonic() < deadline, json.dumps(latest)[:2000]
            time.sleep(0.1)
        d0, d1, d2 = latest["devices"]
        assert [d["status"] for d in (d0, d1, d2)] == ["ok", "ok", "ok"]
        assert d0["name"] is None and d0["unavailable"]["name"] == "not supported on this GPU"
        assert d1["uuid"] is None and "unknown error" in d1["unavailable"]["uuid"]
        assert d2["name"] == "NVIDIA H100 #2" and d0["utilization_gpu_percent"] == 10
        assert latest["cuda_visible_devices"] == []  # no GPU has that UUID, as far as NVML says
        routes = {route: srv.api(route) for route in ("devices", "samples", "processes", "status")}
        for route, body in [("samples/latest", latest), *routes.items()]:
            validate_response(f"/{route}", body)
        assert routes["devices"]["devices"][0]["unavailable"] == {"name": "not supported on this GPU"}
        assert [d["name"] for d in routes["samples"]["devices"]] == [None, "NVIDIA H100 #1", "NVIDIA H100 #2"]

        write_config(config, {"gpus": three_gpus(g0={"nvmlDeviceGetName": NOT_SUPPORTED})})  # GPU 1 answers
        while (latest := srv.api("samples/latest"))["devices"][1]["uuid"] != UUID[1]:
            assert time.monotonic() < deadline + 15, "GPU 1's UUID never came back"
            time.sleep(0.1)
        assert latest["cuda_visible_devices"] == [1]
        assert latest["devices"][1]["unavailable"] == dict.fromkeys(GPM_FIELDS, GPM_OFF)  # GPM: nobody asked
        assert srv.api("devices")["devices"][1]["uuid"] == UUID[1]  # the spec card follows
