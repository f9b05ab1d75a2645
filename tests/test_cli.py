"""`gpu-widgets` from the outside: real processes, a fake libnvidia-ml.so.1 dictating the values."""
from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time

import pytest

from .conftest import run_cli

pytestmark = pytest.mark.integration  # every test here starts a process

GIB = 1 << 30
H200 = {
    "name": "NVIDIA H200",
    "uuid": "GPU-2b7e1d4c-8f3a-4c55-9e21-0a6b5c4d3e2f",
    "memory_total": 141 * GIB,
    "memory_used": 37 * GIB,
    "util_gpu": 97,
    "util_memory": 41,
    "temperature": 71,
    "power_mw": 612_500,
    "power_limit_mw": 700_000,
    "energy_mj": 5_000_000,
    "clock_sm": 1980,
    "clock_mem": 3201,
    "clocks_event_reasons": 0x4 | 0x40,
    "pcie_tx_kbps": 2048,
    "pcie_rx_kbps": 4096,
    "procs": [(os.getpid(), 20 * GIB)],
    "error": {"nvmlDeviceGetFanSpeed": 3},
}
SECOND = {"name": "NVIDIA H200", "uuid": "GPU-99999999-8f3a-4c55-9e21-0a6b5c4d3e2f", "util_gpu": 12}
CONTRACT_FIELDS = {
    "index", "uuid", "name", "status", "utilization_gpu_percent", "utilization_memory_percent",
    "memory_used_bytes", "memory_total_bytes", "temperature_c", "fan_percent", "power_w", "power_limit_w",
    "energy_j", "sm_clock_mhz", "memory_clock_mhz", "throttle_reasons", "pcie_tx_bytes_per_s",
    "pcie_rx_bytes_per_s", "processes", "unavailable",
}


def test_snapshot_json_reports_exactly_what_the_driver_says(fake_driver):
    fake_driver.write({"driver_version": "580.95.05", "cuda_driver_version": 13000, "gpus": [H200, SECOND]})
    out = run_cli("snapshot", "--json", "--backend", "nvml", env=fake_driver.env())
    assert out.returncode == 0, out.stderr
    snap = json.loads(out.stdout)
    assert (snap["backend"], snap["status"], snap["reason"]) == ("nvml", "ok", None)
    assert snap["driver_version"] == "580.95.05" and snap["cuda_driver_version"] == "13.0"
    assert abs(snap["timestamp"] - time.time()) < 60
    d0, d1 = snap["devices"]
    assert CONTRACT_FIELDS <= set(d0)
    assert d0["uuid"] == H200["uuid"] and d0["name"] == "NVIDIA H200" and d0["status"] == "ok"
    assert d0["utilization_gpu_percent"] == 97 and d0["utilization_memory_percent"] == 41
    assert d0["memory_used_bytes"] == 37 * GIB and d0["memory_total_bytes"] == 141 * GIB
    assert d0["temperature_c"] == 71
    assert d0["power_w"] == 612.5 and d0["power_limit_w"] == 700.0 and d0["energy_j"] == 5000.0
    assert d0["sm_clock_mhz"] == 1980 and d0["memory_clock_mhz"] == 3201
    assert d0["throttle_reasons"] == ["sw_power_cap", "hw_thermal_slowdown"]
    assert d0["pcie_tx_bytes_per_s"] == 2048 * 1024 and d0["pcie_rx_bytes_per_s"] == 4096 * 1024
    assert d0["fan_percent"] is None and d0["unavailable"] == {"fan_percent": "not supported on this GPU"}
    [proc] = d0["processes"]
    assert proc["pid"] == os.getpid() and proc["used_memory_bytes"] == 20 * GIB
    assert proc["command"] and proc["name"] and proc["user"]
    assert d1["utilization_gpu_percent"] == 12 and d1["fan_percent"] is not None


def test_info_json_is_the_spec_card(fake_driver):
    fake_driver.write({"gpus": [{**H200, "bus_width": 6144, "max_clock_mem": 3201, "cc_major": 9, "cc_minor": 0}]})
    out = run_cli("info", "--json", "--backend", "nvml", env=fake_driver.env())
    assert out.returncode == 0, out.stderr
    [card] = json.loads(out.stdout)["devices"]
    assert card["memory_bandwidth_bytes_per_s"] == 2 * 3201e6 * 6144 / 8
    assert card["compute_capability"] == "9.0" and card["memory_total_bytes"] == 141 * GIB
    text = run_cli("info", "--backend", "nvml", env=fake_driver.env()).stdout
    assert "NVIDIA H200" in text and "4.92 TB/s" in text


def test_table_shows_every_gpu_and_what_is_unavailable(fake_driver):
    fake_driver.write({"gpus": [H200, SECOND]})
    out = run_cli("snapshot", "--backend", "nvml", env=fake_driver.env())
    assert out.returncode == 0, out.stderr
    assert "backend nvml" in out.stdout and "SIMULATED" not in out.stdout
    assert "97%" in out.stdout and "37.0/141.0 GiB" in out.stdout and "71C" in out.stdout
    assert "power cap!" in out.stdout
    assert f"pid {os.getpid()}" in out.stdout
    assert "fan_percent: not supported on this GPU" in out.stdout


def test_a_gpu_lost_mid_run_is_marked_lost_while_the_other_keeps_reporting(fake_driver):
    fake_driver.write({"gpus": [H200, SECOND]})
    proc = subprocess.Popen(
        [sys.executable, "-m", "gpu_widgets.cli", "snapshot", "--json", "--watch", "0.2", "--backend", "nvml"],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=fake_driver.env(),
    )
    try:
        def next_snapshot():
            line = proc.stdout.readline()
            assert line, proc.stderr.read()
            return json.loads(line)

        assert [d["status"] for d in next_snapshot()["devices"]] == ["ok", "ok"]
        fake_driver.write({"gpus": [{**H200, "util_gpu": 50}, {**SECOND, "error": {"*": 15}}]})
        deadline = time.monotonic() + 30
        while True:
            d0, d1 = next_snapshot()["devices"]
            if d1["status"] == "lost":
                break
            assert time.monotonic() < deadline, "GPU 1 never reported lost"
        assert d1["utilization_gpu_percent"] is None and "GPU is lost" in d1["unavailable"]["utilization_gpu_percent"]
        assert d0["status"] == "ok" and d0["utilization_gpu_percent"] == 50

        fake_driver.write({"gpus": [H200, SECOND]})  # it answers again
        back = time.monotonic()
        while next_snapshot()["devices"][1]["status"] != "ok":
            assert time.monotonic() - back < 15, "GPU 1 did not come back within 15 s"
    finally:
        proc.send_signal(signal.SIGINT)
        proc.wait(10)


def test_driver_not_loaded_prints_the_reason_and_exits_0(fake_driver):
    fake_driver.write({"init_error": 9})
    out = run_cli("snapshot", "--backend", "nvml", env=fake_driver.env())
    assert out.returncode == 0
    assert "No NVIDIA GPU available: the NVIDIA driver is not loaded" in out.stdout
    snap = json.loads(run_cli("snapshot", "--json", env=fake_driver.env()).stdout)
    assert (snap["backend"], snap["status"], snap["devices"]) == ("none", "no_gpu", [])


def test_without_any_nvml_snapshot_prints_the_reason_and_exits_0():
    env = {k: v for k, v in os.environ.items() if k != "LD_LIBRARY_PATH"}
    out = run_cli("snapshot", env=env)
    assert out.returncode == 0, out.stderr
    assert "No NVIDIA GPU available" in out.stdout and "libnvidia-ml.so.1" in out.stdout
    assert out.stderr == ""
    probe = run_cli("probe", env=env)
    assert probe.returncode == 1 and "libnvidia-ml.so.1" in probe.stdout


def test_probe_succeeds_with_a_driver(fake_driver):
    fake_driver.write({"gpus": [H200]})
    out = run_cli("probe", env=fake_driver.env())
    assert out.returncode == 0 and "1 GPU" in out.stdout


def test_simulated_json_has_two_labelled_devices_with_the_contract_fields():
    out = run_cli("snapshot", "--json", env={**os.environ, "GPU_WIDGETS_BACKEND": "simulated"})
    assert out.returncode == 0, out.stderr
    snap = json.loads(out.stdout)
    assert snap["backend"] == "simulated" and len(snap["devices"]) == 2
    for d in snap["devices"]:
        assert CONTRACT_FIELDS <= set(d)
        assert d["name"].startswith("Simulated ")
    table = run_cli("snapshot", "--backend", "simulated").stdout
    assert "SIMULATED GPUs: these are not real devices" in table


@pytest.mark.parametrize(
    "args,env,words",
    [
        (["snapshot", "--backend", "cuda"], {}, "invalid choice: 'cuda'"),
        (["snapshot", "--watch", "0"], {}, "must be at least 0.1 seconds"),
        (["snapshot", "--watch", "soon"], {}, "expected a number of seconds"),
        (["snapshot", "--frobnicate"], {}, "unrecognized arguments: --frobnicate"),
        (["explode"], {}, "invalid choice: 'explode'"),
        (["snapshot"], {"GPU_WIDGETS_BACKEND": "cuda"}, "GPU_WIDGETS_BACKEND='cuda' is not a backend"),
        (["snapshot"], {"GPU_WIDGETS_BACKEND": "simulated", "GPU_WIDGETS_SIMULATED_GPUS": "lots"}, "not a whole number"),
    ],
)
def test_bad_arguments_give_a_clear_message_and_exit_2(args, env, words):
    out = run_cli(*args, env={**os.environ, **env})
    assert out.returncode == 2
    assert words in out.stderr
    assert "Traceback" not in out.stderr


def test_ctrl_c_ends_watch_with_exit_0_and_no_traceback():
    proc = subprocess.Popen(
        [sys.executable, "-m", "gpu_widgets.cli", "snapshot", "--watch", "0.2", "--backend", "simulated"],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    )
    assert "SIMULATED GPUs" in proc.stdout.readline() + proc.stdout.readline()
    proc.send_signal(signal.SIGINT)
    _, err = proc.communicate(timeout=10)
    assert proc.returncode == 0
    assert "Traceback" not in err and "KeyboardInterrupt" not in err


def test_cli_does_not_import_the_widget_or_plotting_stack():
    code = (
        "import sys; from gpu_widgets.cli import main; main(['snapshot', '--backend', 'simulated']);"
        "heavy = {'ipywidgets', 'bqplot', 'jupyter_server', 'numpy', 'pandas', 'torch', 'IPython', 'traitlets'};"
        "print(sorted({m.split('.')[0] for m in sys.modules} & heavy))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip().splitlines()[-1] == "[]"


def test_a_hung_nvml_call_is_reported_stale_not_waited_for(fake_driver):
    hang = {"nvmlDeviceGetPowerUsage": 3_600_000}  # returns only when the config lets it
    fake_driver.write({"gpus": [H200, {**SECOND, "delay_ms": hang}]})
    t = time.monotonic()
    out = run_cli("snapshot", "--backend", "nvml", env=fake_driver.env())
    assert out.returncode == 0, out.stderr
    assert time.monotonic() - t < 30  # 5 s for a first snapshot, a wide margin
    assert "STALE: no sample yet: nvmlDeviceGetPowerUsage on GPU 1 has not returned" in out.stdout

    # --watch: fresh, then stale over the last sample while the call hangs, then fresh again
    fake_driver.write({"gpus": [H200, SECOND]})
    proc = subprocess.Popen([sys.executable, "-m", "gpu_widgets.cli", "snapshot", "--json", "--watch", "0.2",
                             "--backend", "nvml"], stdout=subprocess.PIPE, text=True, env=fake_driver.env())
    try:
        def next_where(predicate):
            deadline = time.monotonic() + 30
            while time.monotonic() < deadline:
                snap = json.loads(proc.stdout.readline())
                if predicate(snap):
                    return snap
            raise AssertionError("timed out")

        first = next_where(lambda s: True)
        assert first["status"] == "ok" and first["sample_age_s"] < 30
        fake_driver.write({"gpus": [H200, {**SECOND, "delay_ms": hang}]})
        stale = next_where(lambda s: s["status"] == "stale")
        assert stale["reason"] == "nvmlDeviceGetPowerUsage on GPU 1 has not returned"
        assert stale["sample_age_s"] > 2 and len(stale["devices"]) == 2  # the last sample
        fake_driver.write({"gpus": [H200, {**SECOND, "util_gpu": 55}]})
        back = next_where(lambda s: s["status"] == "ok" and s["devices"][1]["utilization_gpu_percent"] == 55)
        assert back["reason"] is None
    finally:
        proc.send_signal(signal.SIGINT)
        assert proc.wait(30) == 0


def _subcommands() -> list[str]:
    from gpu_widgets.cli import _subparsers, build_parser

    names = sorted(_subparsers(build_parser()))
    assert {"snapshot", "info", "probe", "runs", "exporter"} <= set(names)
    return names


@pytest.mark.parametrize("command", _subcommands())
def test_a_bad_flag_on_a_subcommand_shows_that_subcommands_usage(command):
    out = run_cli(command, "--bogus", "-x")
    assert out.returncode == 2 and out.stdout == ""
    assert out.stderr.startswith(f"usage: gpu-widgets {command} [-h]"), out.stderr
    errors = [line for line in out.stderr.splitlines() if "error:" in line]
    assert errors == [f"gpu-widgets {command}: error: unrecognized arguments: --bogus -x"], out.stderr


def test_a_bad_flag_before_any_subcommand_shows_the_top_level_usage():
    out = run_cli("--bogus")
    assert out.returncode == 2
    assert out.stderr.startswith("usage: gpu-widgets [-h]") and out.stderr.splitlines()[-1] == (
        "gpu-widgets: error: unrecognized arguments: --bogus")
