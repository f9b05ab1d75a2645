"""The sample's shapes (metrics/samples.py) against the field list, the snapshot constructors, and
throttle reasons: one bitmask inside, names in every JSON answer."""
from __future__ import annotations

import json
import os
import time

import pytest

from gpu_widgets.backends import SimulatedBackend, parse_faults
from gpu_widgets.backends.nvml.backend import NvmlBackend
from gpu_widgets.metrics import samples, throttle
from gpu_widgets.metrics.fields import FAST_FIELDS, SAMPLE_FIELDS, SLOW_FIELDS
from gpu_widgets.sampling.snapshot import aged, empty, public, take, with_status
from gpu_widgets.service.service import GpuService

from .fake_nvml import build_fake_nvml, fake_nvml_env, write_config
from .fake_pynvml import FakeNvml, h100
from .lab_server import LabServer

FIELD_NAMES = [f.name for f in SAMPLE_FIELDS]
SNAPSHOT_KEYS = ["backend", "status", "reason", "timestamp", "driver_version", "cuda_driver_version",
                 "nvml_version", "cuda_visible_devices", "devices"]


def disagreement(typed: type, expected: list[str], extra_keys: tuple[str, ...] = ()) -> list[str]:
    """What differs between a TypedDict's keys and the field list, each named (empty when they agree)."""
    keys = set(typed.__required_keys__)  # inherited keys included
    missing = [f"{f} is in fields.py but not in {typed.__name__}" for f in expected if f not in keys]
    unknown = [f"{k} is in {typed.__name__} but not in fields.py" for k in sorted(keys - set(expected) - set(extra_keys))]
    return missing + unknown


def test_the_typed_sample_has_exactly_the_fields_of_the_field_list():
    assert not disagreement(samples.DeviceSample, FIELD_NAMES, samples.DEVICE_KEYS)
    assert not disagreement(samples.FastRead, list(FAST_FIELDS), samples.DEVICE_KEYS)
    assert not disagreement(samples.SlowRead, list(SLOW_FIELDS), ("index", "unavailable"))
    assert set(samples.Snapshot.__required_keys__) == set(SNAPSHOT_KEYS)


def test_a_field_missing_from_the_typed_sample_is_named():
    assert disagreement(samples.DeviceSample, [*FIELD_NAMES, "made_up_watts"], samples.DEVICE_KEYS) == [
        "made_up_watts is in fields.py but not in DeviceSample"]
    assert disagreement(samples.DeviceSample, FIELD_NAMES[1:], samples.DEVICE_KEYS) == [
        f"{FIELD_NAMES[0]} is in DeviceSample but not in fields.py"]


def test_what_the_backends_read_has_the_typed_keys():
    sim = SimulatedBackend(n_gpus=2, t0=1000.0, faults=parse_faults("lost:1@0"))
    sim.open()
    nvml = NvmlBackend(nvml=FakeNvml([h100()]))
    nvml.open()
    for backend in (sim, nvml):
        snap = take(backend, 1010.0)
        assert list(snap) == SNAPSHOT_KEYS
        for dev in snap["devices"]:  # a lost GPU too
            assert set(dev) == set(samples.DeviceSample.__required_keys__), backend.name
        fast, slow = backend.read_fast(1010.0), backend.read_slow(1010.0)
        assert set(fast[0]) == set(samples.FastRead.__required_keys__)
        assert set(slow[0]) == set(samples.SlowRead.__required_keys__)
        assert all(type(d["throttle_reasons"]) is int for d in snap["devices"] if d["status"] == "ok")


def test_names_are_made_from_the_mask_and_read_back_from_files():
    mask = throttle.BITS["gpu_idle"] | throttle.BITS["sw_power_cap"] | (1 << 40)
    names = throttle.names_from_mask(mask)
    assert names == ["sw_power_cap", "gpu_idle", "other_0x10000000000"]  # display order, unknown bits last
    assert throttle.mask_from_names(names) == mask  # a run file round-trips, unknown bits included
    assert throttle.mask_from_names(["sw_power_cap", "a_reason_of_a_newer_version"]) == throttle.BITS["sw_power_cap"]
    assert throttle.slowdown_names(mask) == ["sw_power_cap"] and throttle.slowdown_names(None) == []
    assert throttle.json_names(None) is None and throttle.json_names(0) == []
    names.append("changed")  # callers get their own list: the cache is not touched
    assert throttle.names_from_mask(mask) == ["sw_power_cap", "gpu_idle", "other_0x10000000000"]


def test_the_empty_snapshot_has_every_key_of_a_composed_one():
    backend = SimulatedBackend(n_gpus=1, t0=0.0)
    snap = empty("no_gpu", "no driver", backend, timestamp=5.0)
    assert list(snap) == SNAPSHOT_KEYS and snap["devices"] == [] and snap["cuda_visible_devices"] is None
    assert (snap["backend"], snap["driver_version"], snap["timestamp"]) == ("simulated", "simulated", 5.0)
    assert empty("starting", None)["backend"] is None and time.time() - empty("starting", None)["timestamp"] < 5


def test_restating_and_publishing_a_snapshot_leave_the_shared_one_alone():
    backend = SimulatedBackend(n_gpus=1, t0=0.0, faults=parse_faults("throttle:0@0:sw_power_cap"))
    backend.open()
    snap = take(backend, 100.0)
    before = json.dumps(snap)
    stale = with_status(snap, "stale", "stuck in nvmlDeviceGetPowerUsage")
    assert (stale["status"], stale["devices"]) == ("stale", snap["devices"])
    assert with_status(None, "stale", "why", backend)["devices"] == []
    out = public(aged(snap, "ok", None, 0.5))
    assert list(out)[:4] == ["backend", "status", "reason", "sample_age_s"]
    assert out["devices"][0]["throttle_reasons"] == ["sw_power_cap"]
    assert json.dumps(snap) == before  # still the bitmask, still the same dict


def test_the_pending_answer_has_the_keys_of_a_sample():
    service = GpuService(backend=SimulatedBackend(n_gpus=1))
    answer = service.pending_answer()
    assert set(answer) == {*SNAPSHOT_KEYS, "sample_age_s"} and answer["devices"] == []
    assert (answer["status"], answer["reason"]) == ("starting", "the GPU sampler is starting")


@pytest.mark.integration
def test_every_answer_names_the_reasons_the_driver_set(tmp_path):
    mask = throttle.BITS["gpu_idle"] | throttle.BITS["hw_slowdown"] | (1 << 40)
    expected = ["hw_slowdown", "gpu_idle", "other_0x10000000000"]
    config = tmp_path / "nvml.conf"
    write_config(config, {"gpus": [{"util_gpu": 50, "clocks_event_reasons": mask, "procs": [(os.getpid(), 1 << 30)]}]})
    env = {**fake_nvml_env(build_fake_nvml(), config), "GPU_WIDGETS_BACKEND": "nvml"}
    with LabServer(tmp_path, env=env, args=("--GpuWidgets.interval_s=0.2",)) as srv:
        deadline = time.monotonic() + 20
        while not srv.api("samples/latest")["devices"]:
            assert time.monotonic() < deadline
            time.sleep(0.1)
        assert srv.api("samples/latest")["devices"][0]["throttle_reasons"] == expected
        while len(srv.api("samples")["timestamps"]) < 3:
            assert time.monotonic() < deadline
            time.sleep(0.1)
        history = srv.api("samples", max_points=2)["devices"][0]["throttle_reasons"]
        assert history == [expected, expected]  # merged over a bucket, named once written
