"""``gpu_widgets.pick_gpus()`` in real processes under the fake libnvidia-ml.so.1: which GPUs it
chooses, the environment it leaves, and each way it refuses. pynvml loads the driver once per
process, so each scenario runs in its own Python process."""
from __future__ import annotations

import json
import math
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from gpu_widgets import PickGpusError, pick_gpus
from gpu_widgets.pick import _fold, _Gpu

ROOT = Path(__file__).resolve().parents[1]
GIB = 1 << 30
TOTAL = 80 * GIB
OTHER_PID = 4_000_001  # above any pid this machine hands out: never this test's process


def gpu(util: int = 0, used_gib: int = 0, **more) -> dict:
    """A fake H100 with ``util`` % busy and ``used_gib`` held by another process."""
    procs = [(OTHER_PID + used_gib, used_gib * GIB)] if used_gib else []
    return {"memory_total": TOTAL, "memory_used": used_gib * GIB, "util_gpu": util, "procs": procs, **more}


# GPU 0 busy, GPU 1 idle but an idle kernel holds 30 GiB, GPU 2 idle and empty.
THREE = [gpu(util=97, used_gib=40), gpu(util=0, used_gib=30), gpu(util=0)]

# Runs the calls in order in one process; prints what each returned or raised, and the environment after.
SCRIPT = r"""
import json, os, sys, warnings
{prelude}
from gpu_widgets import PickGpusError, pick_gpus
results = []
for args, kwargs in json.loads(sys.argv[1]):
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        try:
            result = {{"picked": pick_gpus(*args, **kwargs)}}
        except PickGpusError as exc:
            result = {{"error": str(exc)}}
    result["warnings"] = [str(w.message) for w in caught]
    result["env"] = {{k: os.environ.get(k) for k in ("CUDA_VISIBLE_DEVICES", "CUDA_DEVICE_ORDER")}}
    results.append(result)
print(json.dumps(results))
"""


def run_pick(env: dict[str, str], *calls: tuple[list, dict], prelude: str = "") -> list[dict]:
    done = subprocess.run([sys.executable, "-c", SCRIPT.format(prelude=prelude), json.dumps(calls)],
                          cwd=ROOT, env=env, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout.splitlines()[-1])


def clean_env(fake_driver, **extra: str) -> dict[str, str]:
    """The fake driver's environment with no CUDA or backend setting but those given."""
    env = fake_driver.env(**extra)
    for name in ("CUDA_VISIBLE_DEVICES", "CUDA_DEVICE_ORDER", "GPU_WIDGETS_BACKEND"):
        if name not in extra:
            env.pop(name, None)
    return env


@pytest.mark.integration
def test_picks_the_least_busy_then_the_freest_and_points_cuda_at_them(fake_driver):
    fake_driver.write({"gpus": THREE})
    one, two, three = run_pick(clean_env(fake_driver), ([], {}), ([2], {}), ([3], {}))
    assert one["picked"] == [2] and one["warnings"] == []
    assert one["env"] == {"CUDA_VISIBLE_DEVICES": "2", "CUDA_DEVICE_ORDER": "PCI_BUS_ID"}
    # Best first: cuda:0 is GPU 2, cuda:1 is GPU 1 (as idle, less free memory).
    assert two["picked"] == [2, 1] and two["env"]["CUDA_VISIBLE_DEVICES"] == "2,1"
    # Calling again after our own choice chooses among all GPUs again, not among the one picked before.
    assert three["picked"] == [2, 1, 0] and three["env"]["CUDA_VISIBLE_DEVICES"] == "2,1,0"


@pytest.mark.integration
def test_thresholds_exclude_and_the_error_names_each_gpu_its_failed_condition_and_values(fake_driver):
    fake_driver.write({"gpus": THREE})
    ok, refused = run_pick(clean_env(fake_driver),
                           ([1], {"max_busy_percent": 50, "min_free_memory_gib": 45}),
                           ([2], {"max_busy_percent": 50, "min_free_memory_gib": 60}))
    assert ok["picked"] == [2]
    message = refused["error"]
    assert message.startswith("pick_gpus(n=2, min_free_memory_gib=60, max_busy_percent=50): 1 of 3 GPUs qualifies, 2 wanted")
    lines = message.splitlines()[1:]
    assert "GPU 0 " in lines[0] and "busy 97 % > max_busy_percent=50" in lines[0]
    assert "40.0 GiB free < min_free_memory_gib=60" in lines[0]
    assert "GPU 1 " in lines[1] and "50.0 GiB free < min_free_memory_gib=60" in lines[1]
    assert "1 other process holds 30.0 GiB" in lines[1] and "busy 0 %" in lines[1] and "max_busy" not in lines[1]
    assert "GPU 2 " in lines[2] and lines[2].endswith("-> qualifies")
    # A refusal leaves the environment as the last success left it.
    assert refused["env"] == ok["env"] == {"CUDA_VISIBLE_DEVICES": "2", "CUDA_DEVICE_ORDER": "PCI_BUS_ID"}


@pytest.mark.integration
def test_not_enough_gpus_a_lost_gpu_and_one_in_mig_mode(fake_driver):
    fake_driver.write({"gpus": [gpu(), gpu(error={"*": 15}), gpu(mig_current=1)]})
    [result] = run_pick(clean_env(fake_driver), ([2], {}))
    first, lost, mig = result["error"].splitlines()[1:]
    assert result["error"].startswith("pick_gpus(n=2): 1 of 3 GPUs qualifies, 2 wanted")
    assert "GPU 0 " in first and first.endswith("-> qualifies")
    assert "GPU 1 " in lost and "fails: lost (" in lost and "GPU is lost" in lost
    assert "GPU 2 " in mig and "fails: in MIG mode" in mig
    assert result["env"] == {"CUDA_VISIBLE_DEVICES": None, "CUDA_DEVICE_ORDER": None}


@pytest.mark.integration
def test_no_gpu_gives_nvmls_reason(fake_driver):
    fake_driver.write({"init_error": 9})  # NVML_ERROR_DRIVER_NOT_LOADED
    [result] = run_pick(clean_env(fake_driver), ([], {}))
    assert result["error"].startswith("no GPU to pick: ") and "driver" in result["error"].lower()
    assert result["env"]["CUDA_VISIBLE_DEVICES"] is None


@pytest.mark.integration
def test_refuses_when_pytorch_has_already_initialised_cuda(fake_driver, tmp_path):
    fake_driver.write({"gpus": THREE})
    for started in (True, False):
        torch = tmp_path / str(started) / "torch"
        torch.mkdir(parents=True)
        (torch / "__init__.py").write_text(
            f"class cuda:\n    @staticmethod\n    def is_initialized():\n        return {started}\n")
        env = clean_env(fake_driver, PYTHONPATH=str(torch.parent))
        [result] = run_pick(env, ([], {}), prelude="import torch")
        if started:
            assert "PyTorch has already initialised CUDA in this process" in result["error"]
            assert "Restart the kernel" in result["error"] and result["env"]["CUDA_VISIBLE_DEVICES"] is None
        else:
            assert result["picked"] == [2]


@pytest.mark.integration
def test_refuses_when_this_process_already_holds_gpu_memory(fake_driver):
    # JAX, CuPy, ...: any CUDA user shows up in NVML's process list under this process's pid.
    fake_driver.write({"gpus": THREE})
    prelude = ("from tests.fake_nvml import write_config\n"
               "write_config(os.environ['FAKE_NVML_CONFIG'], {'gpus': [{'procs': [(os.getpid(), 1 << 30)]}, {}]})")
    [result] = run_pick(clean_env(fake_driver), ([], {}), prelude=prelude)
    assert "already holds memory on GPU 0: CUDA is initialised here" in result["error"]
    assert result["env"]["CUDA_VISIBLE_DEVICES"] is None


@pytest.mark.integration
def test_an_existing_cuda_visible_devices_limits_the_choice_and_is_answered_in_its_form(fake_driver):
    uuids = [f"GPU-{i}1111111-2222-3333-4444-555555555555" for i in range(3)]
    fake_driver.write({"gpus": [{**g, "uuid": u} for g, u in zip(THREE, uuids)]})
    [by_index] = run_pick(clean_env(fake_driver, CUDA_VISIBLE_DEVICES="0,1"), ([], {}))
    assert by_index["picked"] == [1]  # GPU 2 is the best but hidden
    assert by_index["env"] == {"CUDA_VISIBLE_DEVICES": "1", "CUDA_DEVICE_ORDER": "PCI_BUS_ID"}
    [by_uuid] = run_pick(clean_env(fake_driver, CUDA_VISIBLE_DEVICES=f"{uuids[0]},{uuids[2][:12]}"), ([2], {}))
    assert by_uuid["picked"] == [2, 0]
    assert by_uuid["env"] == {"CUDA_VISIBLE_DEVICES": f"{uuids[2]},{uuids[0]}", "CUDA_DEVICE_ORDER": "PCI_BUS_ID"}
    [too_few] = run_pick(clean_env(fake_driver, CUDA_VISIBLE_DEVICES="0,1"), ([3], {}))
    assert "GPU 2 " in too_few["error"] and "fails: hidden by CUDA_VISIBLE_DEVICES='0,1'" in too_few["error"]
    [empty] = run_pick(clean_env(fake_driver, CUDA_VISIBLE_DEVICES=""), ([], {}))
    assert "CUDA_VISIBLE_DEVICES='' leaves this process no GPU" in empty["error"]
    [mig] = run_pick(clean_env(fake_driver, CUDA_VISIBLE_DEVICES="MIG-abc"), ([], {}))
    assert "names a MIG instance" in mig["error"]


@pytest.mark.integration
def test_indices_on_mixed_models_need_pci_bus_order(fake_driver):
    fake_driver.write({"gpus": [{**THREE[0], "name": "NVIDIA A100"}, *THREE[1:]]})
    [refused] = run_pick(clean_env(fake_driver, CUDA_VISIBLE_DEVICES="0,2"), ([], {}))
    assert "set CUDA_DEVICE_ORDER=PCI_BUS_ID or name them by UUID" in refused["error"]
    [ok] = run_pick(clean_env(fake_driver, CUDA_VISIBLE_DEVICES="0,2", CUDA_DEVICE_ORDER="PCI_BUS_ID"), ([], {}))
    assert ok["picked"] == [2]


@pytest.mark.integration
def test_simulated_gpus_are_picked_only_when_chosen_and_with_a_warning(fake_driver):
    fake_driver.write({"gpus": THREE})
    env = clean_env(fake_driver, GPU_WIDGETS_BACKEND="simulated", GPU_WIDGETS_SIMULATED_GPUS="4")
    [simulated] = run_pick(env, ([], {}))
    assert len(simulated["picked"]) == 1 and 0 <= simulated["picked"][0] < 4
    assert any("SIMULATED GPUs" in w for w in simulated["warnings"])
    [real] = run_pick(clean_env(fake_driver), ([], {}))  # a real driver: never simulated by itself
    assert real["picked"] == [2] and real["warnings"] == []


@pytest.mark.parametrize(("kwargs", "error", "words"), [
    ({"n": 0}, ValueError, "n must be between 1 and 1024, got 0"),
    ({"n": 1.5}, TypeError, "n must be a whole number of GPUs, got 1.5"),
    ({"n": True}, TypeError, "n must be a whole number of GPUs, got True"),
    ({"n": "2"}, TypeError, "got '2'"),
    ({"min_free_memory_gib": -1}, ValueError, "min_free_memory_gib must be between 0 and 65536, got -1"),
    ({"min_free_memory_gib": math.nan}, ValueError, "min_free_memory_gib must be between 0 and 65536, got nan"),
    ({"max_busy_percent": 101}, ValueError, "max_busy_percent must be between 0 and 100, got 101"),
    ({"max_busy_percent": "5"}, TypeError, "max_busy_percent must be a number or None, got '5'"),
    # Huge, infinite, boolean: each named, the value shown short (repr of a 5000-digit int fails).
    ({"n": 10**5000}, ValueError, "n must be between 1 and 1024, got an integer of about 5001 digits"),
    ({"n": 1025}, ValueError, "n must be between 1 and 1024, got 1025"),
    ({"min_free_memory_gib": 10**400}, ValueError,
     "min_free_memory_gib must be between 0 and 65536, got an integer of about 401 digits"),
    ({"min_free_memory_gib": math.inf}, ValueError, "min_free_memory_gib must be between 0 and 65536, got inf"),
    ({"min_free_memory_gib": True}, TypeError, "min_free_memory_gib must be a number or None, got True"),
    ({"min_free_memory_gib": "x" * 10_000}, TypeError, "got 'xxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxx... (10002 characters)"),
    ({"max_busy_percent": -math.inf}, ValueError, "max_busy_percent must be between 0 and 100, got -inf"),
    ({"max_busy_percent": math.nan}, ValueError, "max_busy_percent must be between 0 and 100, got nan"),
    ({"max_busy_percent": False}, TypeError, "max_busy_percent must be a number or None, got False"),
    ({"timeout_s": 0}, ValueError, "timeout_s must be more than 0 and at most 3600, got 0"),
    ({"timeout_s": -1.5}, ValueError, "timeout_s must be more than 0 and at most 3600, got -1.5"),
    ({"timeout_s": math.nan}, ValueError, "timeout_s must be more than 0 and at most 3600, got nan"),
    ({"timeout_s": math.inf}, ValueError, "timeout_s must be more than 0 and at most 3600, got inf"),
    ({"timeout_s": 10**400}, ValueError, "timeout_s must be more than 0 and at most 3600, got an integer of about 401"),
    ({"timeout_s": True}, TypeError, "timeout_s must be a number, got True"),
    ({"timeout_s": None}, TypeError, "timeout_s must be a number, got None"),
])
def test_bad_arguments_are_refused_before_any_gpu_is_read(kwargs, error, words, monkeypatch):
    monkeypatch.setenv("GPU_WIDGETS_BACKEND", "no-such-backend")  # reading the GPUs would fail otherwise
    with pytest.raises(error, match="^pick_gpus\\(\\): ") as caught:
        pick_gpus(**kwargs)
    assert words in str(caught.value)
    assert issubclass(PickGpusError, RuntimeError)


def test_two_looks_keep_the_higher_utilization_and_the_lower_free_memory():
    looks = [{"status": "ok", "utilization_gpu_percent": 0, "memory_free_bytes": 9 * GIB, "processes": [],
              "unavailable": {}},
             {"status": "ok", "utilization_gpu_percent": 88, "memory_free_bytes": 10 * GIB, "processes": [],
              "unavailable": {}}]
    for order in (looks, looks[::-1]):
        seen = _Gpu(index=0, uuid=None, name=None)
        for look in order:
            _fold(seen, look)
        assert (seen.busy_percent, seen.free_bytes) == (88, 9 * GIB)


def test_numpy_numbers_are_numbers(monkeypatch):
    np = pytest.importorskip("numpy")
    with pytest.raises(ValueError, match="^pick_gpus\\(\\): n must be between 1 and 1024, got "):
        pick_gpus(np.int64(0))
    with pytest.raises(ValueError, match="^pick_gpus\\(\\): max_busy_percent must be between 0 and 100, got "):
        pick_gpus(max_busy_percent=np.float64(100.5))
    monkeypatch.setenv("GPU_WIDGETS_BACKEND", "no-such-backend")
    with pytest.raises(ValueError, match="GPU_WIDGETS_BACKEND"):  # valid: it got as far as the backend
        pick_gpus(np.int64(2), min_free_memory_gib=np.float32(1.5), max_busy_percent=np.int32(5))


HANG_MS = 3_600_000  # the fake's longest delay: the call returns only when the config lets it


@pytest.mark.parametrize(("call", "timeout_s", "kwargs"), [
    ("nvmlDeviceGetUtilizationRates", 1, {"timeout_s": 1}),
    ("nvmlDeviceGetComputeRunningProcesses_v3", 5, {}),  # the default
])
@pytest.mark.integration
def test_a_hung_driver_call_gives_up_after_timeout_s_naming_the_call_and_the_process_still_exits(
        fake_driver, call, timeout_s, kwargs):
    fake_driver.write({"gpus": [THREE[0], {**THREE[2], "delay_ms": {call: HANG_MS}}]})
    started = time.monotonic()
    # The hung call stays inside the driver for an hour: the run ends only if its thread is a daemon.
    [result] = run_pick(clean_env(fake_driver), ([], kwargs))
    assert time.monotonic() - started < 60  # a wide margin over timeout_s and Python's start
    assert result["error"].startswith(f"pick_gpus(): gave up after {timeout_s} s (timeout_s): "
                                      f"{call} on GPU 1 has not returned. The NVIDIA driver is not answering")
    assert result["env"] == {"CUDA_VISIBLE_DEVICES": None, "CUDA_DEVICE_ORDER": None}


@pytest.mark.integration
def test_a_call_that_is_only_slow_is_waited_for(fake_driver):
    fake_driver.write({"gpus": THREE, "delay_ms": {"nvmlDeviceGetUtilizationRates": 300}})
    [result] = run_pick(clean_env(fake_driver), ([], {"timeout_s": 30}))
    assert result["picked"] == [2]


@pytest.mark.integration
def test_a_5000_digit_cuda_visible_devices_is_named_short_with_what_cuda_accepts(fake_driver):
    fake_driver.write({"gpus": THREE})
    [refused] = run_pick(clean_env(fake_driver, CUDA_VISIBLE_DEVICES="9" * 5000), ([], {}))
    message = refused["error"]
    assert message.startswith(f"CUDA_VISIBLE_DEVICES={'9' * 40!r}... (5000 characters) leaves this process no GPU")
    assert "it accepts comma-separated GPU indices (0,2), GPU UUIDs" in message and len(message) < 500
    # After a valid entry, CUDA stops at the unresolvable one: GPU 1 alone is visible.
    [picked] = run_pick(clean_env(fake_driver, CUDA_VISIBLE_DEVICES="1," + "0" * 5000), ([], {}))
    assert picked["picked"] == [1]
