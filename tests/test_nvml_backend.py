"""The NVML backend with pynvml faked at its functions: values, units and every error class."""
from __future__ import annotations

import os

import psutil
import pynvml
import pytest

from gpu_widgets.backends.base import GPM_OFF
from gpu_widgets.backends.nvml import backend as nvml_backend
from gpu_widgets.backends.nvml.backend import NvmlBackend
from gpu_widgets.backends.nvml.errors import classify
from gpu_widgets.backends.nvml.library import NoGpu, Nvml
from gpu_widgets.metrics.fields import GPM_FIELDS
from gpu_widgets.metrics.throttle import BITS
from gpu_widgets.sampling.snapshot import public, take

from .fake_pynvml import GIB, FakeNvml, h100

NOT_SUPPORTED, FUNCTION_NOT_FOUND, GPU_IS_LOST, UNKNOWN, TIMEOUT = 3, 13, 15, 999, 10
DRIVER_NOT_LOADED, LIBRARY_NOT_FOUND, NO_PERMISSION = 9, 12, 4


class StepClock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def opened(fake: FakeNvml, clock: StepClock | None = None) -> NvmlBackend:
    backend = NvmlBackend(nvml=fake, clock=clock or StepClock())
    backend.open()
    return backend


def test_sample_values_are_converted_to_the_units_in_their_names():
    fake = FakeNvml([h100(procs=[(os.getpid(), 3 * GIB)])])
    snap = take(opened(fake), 1764680000.0)
    assert snap["backend"] == "nvml" and snap["status"] == "ok" and snap["reason"] is None
    assert snap["driver_version"] == "580.65.06"
    assert snap["cuda_driver_version"] == "13.0"
    d = snap["devices"][0]
    assert d["status"] == "ok"
    assert d["utilization_gpu_percent"] == 97
    assert d["utilization_memory_percent"] == 40
    # v2 memory info is used: the fake's v1 would report 0.5 GiB more in use
    assert d["memory_used_bytes"] == 10 * GIB
    assert d["memory_total_bytes"] == 80 * GIB
    assert d["temperature_c"] == 70
    assert d["fan_percent"] == 33
    assert d["power_w"] == 300.0  # from 300000 mW
    assert d["power_limit_w"] == 700.0
    assert d["energy_j"] == pytest.approx(123456.789)  # from mJ
    assert (d["sm_clock_mhz"], d["memory_clock_mhz"], d["graphics_clock_mhz"]) == (1980, 2619, 1980)
    assert d["performance_state"] == 0
    assert d["throttle_reasons"] == BITS["sw_power_cap"]  # NVML's bitmask until JSON is written
    assert public(snap)["devices"][0]["throttle_reasons"] == ["sw_power_cap"]
    assert d["pcie_tx_bytes_per_s"] == 1000 * 1024  # from KB/s
    assert d["pcie_rx_bytes_per_s"] == 2000 * 1024
    assert d["unavailable"] == dict.fromkeys(GPM_FIELDS, GPM_OFF)  # nobody asked for GPM (tests/test_gpm.py)
    [proc] = d["processes"]
    me = psutil.Process()
    assert proc["pid"] == os.getpid()
    assert proc["used_memory_bytes"] == 3 * GIB
    assert proc["name"] == me.name()
    assert proc["user"] == me.username()
    assert proc["uid"] == os.getuid()
    assert proc["command"] == " ".join(me.cmdline())


def test_static_info_is_the_spec_card_with_a_documented_bandwidth():
    info = opened(FakeNvml([h100(), h100(name="NVIDIA A100-SXM4-80GB", cc=(8, 0), mig=(1, 1))])).device_info()
    a = info[0]
    assert a["name"] == "NVIDIA H100 80GB HBM3"
    assert a["uuid"].startswith("GPU-")
    assert a["memory_total_bytes"] == 80 * GIB
    assert (a["power_limit_w"], a["power_default_limit_w"]) == (700.0, 700.0)
    assert (a["max_sm_clock_mhz"], a["max_memory_clock_mhz"]) == (1980, 2619)
    assert a["cores"] == 16896
    assert a["memory_bus_width_bits"] == 5120
    assert a["memory_bandwidth_bytes_per_s"] == pytest.approx(3.352e12, rel=1e-3)  # H100 SXM datasheet: 3.35 TB/s
    assert (a["pcie_max_generation"], a["pcie_max_width"]) == (5, 16)
    assert a["compute_capability"] == "9.0"
    assert a["mig_mode"] == "disabled"
    assert info[1]["compute_capability"] == "8.0" and info[1]["mig_mode"] == "enabled"


def test_mig_instances_are_listed_and_map_cuda_visible_devices_to_their_gpu(monkeypatch):
    a100 = h100(name="NVIDIA A100-SXM4-80GB", cc=(8, 0), mig=(1, 1),
                mig_devices=["MIG-aaaa0001-0000", None, "MIG-bbbb0002-0000"])  # slot 1 is empty
    backend = opened(FakeNvml([h100(), a100]))
    info = backend.device_info()
    assert info[0]["mig_device_uuids"] == [] and "mig_device_uuids" not in info[0]["unavailable"]
    assert info[1]["mig_device_uuids"] == ["MIG-aaaa0001-0000", "MIG-bbbb0002-0000"]
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "MIG-bbbb0002-0000")
    assert take(backend, 1.0)["cuda_visible_devices"] == [1]
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "MIG-cccc")  # no such instance: CUDA sees nothing
    assert take(backend, 2.0)["cuda_visible_devices"] == []


@pytest.mark.parametrize(
    ("fake_kw", "words"),
    [
        ({"missing": ("nvmlDeviceGetMaxMigDeviceCount",)}, "this nvidia-ml-py has no nvmlDeviceGetMaxMigDeviceCount"),
        ({}, "no permission"),
    ],
)
def test_mig_instances_that_cannot_be_read_are_null_with_the_reason(fake_kw, words):
    errors = {} if fake_kw else {"nvmlDeviceGetMigDeviceHandleByIndex": pynvml.NVML_ERROR_NO_PERMISSION}
    gpu = h100(mig=(1, 1), mig_devices=["MIG-aaaa0001-0000"], errors=errors)
    info = opened(FakeNvml([gpu], **fake_kw)).device_info()[0]
    assert info["mig_mode"] == "enabled"  # read by its own query, unaffected
    assert info["mig_device_uuids"] is None and words in info["unavailable"]["mig_device_uuids"]


def test_not_supported_is_null_with_a_reason_and_never_asked_again():
    fake = FakeNvml([h100(errors={"nvmlDeviceGetFanSpeed": NOT_SUPPORTED})])
    backend = opened(fake)
    for t in range(3):
        d = backend.read_fast(float(t))[0]
        assert d["fan_percent"] is None
        assert d["unavailable"]["fan_percent"] == "not supported on this GPU"
        assert d["temperature_c"] == 70  # the rest of the device is unaffected
    assert fake.calls["nvmlDeviceGetFanSpeed"] == 1


def test_function_not_found_falls_back_to_the_older_call():
    fake = FakeNvml([h100(errors={
        "nvmlDeviceGetCurrentClocksEventReasons": FUNCTION_NOT_FOUND,
        "nvmlDeviceGetMemoryInfo_v2": FUNCTION_NOT_FOUND,
        "nvmlDeviceGetComputeRunningProcesses_v3": FUNCTION_NOT_FOUND,
    }, procs=[(4_300_000, GIB)])])
    backend = opened(fake)
    d = take(backend, 1.0)["devices"][0]
    assert d["throttle_reasons"] == BITS["sw_power_cap"]
    assert fake.calls["nvmlDeviceGetCurrentClocksThrottleReasons"] == 1
    assert d["memory_used_bytes"] == 10 * GIB + GIB // 2  # the v1 figure
    assert [p["pid"] for p in d["processes"]] == [4_300_000]
    assert fake.calls["nvmlDeviceGetComputeRunningProcesses_v2"] == 1


def test_an_older_pynvml_without_the_new_function_falls_back():
    fake = FakeNvml([h100()], missing=("nvmlDeviceGetCurrentClocksEventReasons", "nvmlMemory_v2"))
    d = opened(fake).read_fast(0.0)[0]
    assert d["throttle_reasons"] == BITS["sw_power_cap"]
    assert d["memory_used_bytes"] == 10 * GIB + GIB // 2
    assert d["unavailable"] == {}


def test_function_not_found_without_fallback_is_remembered_with_its_reason():
    fake = FakeNvml([h100(errors={"nvmlDeviceGetTotalEnergyConsumption": FUNCTION_NOT_FOUND})])
    backend = opened(fake)
    backend.read_fast(0.0)
    d = backend.read_fast(1.0)[0]
    assert d["energy_j"] is None
    assert "function not found" in d["unavailable"]["energy_j"]
    assert fake.calls["nvmlDeviceGetTotalEnergyConsumption"] == 1


@pytest.mark.parametrize("code,words", [(UNKNOWN, "unknown error"), (TIMEOUT, "timed out")])
def test_transient_errors_are_null_with_a_reason_and_asked_again(code, words):
    gpu = h100(errors={"nvmlDeviceGetPowerUsage": code})
    fake = FakeNvml([gpu])
    backend = opened(fake)
    d = backend.read_fast(0.0)[0]
    assert d["power_w"] is None and words in d["unavailable"]["power_w"]
    assert d["status"] == "ok"
    gpu["errors"].clear()
    d = backend.read_fast(1.0)[0]
    assert d["power_w"] == 300.0 and "power_w" not in d["unavailable"]


def test_no_permission_is_null_with_a_reason():
    d = opened(FakeNvml([h100(errors={"nvmlDeviceGetPcieThroughput": NO_PERMISSION})])).read_slow(0.0)[0]
    assert d["pcie_tx_bytes_per_s"] is None
    assert d["unavailable"]["pcie_tx_bytes_per_s"] == "no permission to read it"


def test_unexpected_exception_in_the_bindings_is_data_not_a_crash(monkeypatch):
    fake = FakeNvml([h100()])

    def broken(h):
        raise OSError("ctypes went wrong")

    monkeypatch.setattr(fake, "nvmlDeviceGetTemperature", lambda h, s: broken(h))
    backend = opened(fake)  # the backend looks pynvml's functions up when it opens
    d = backend.read_fast(0.0)[0]
    assert d["temperature_c"] is None
    assert "OSError: ctypes went wrong" in d["unavailable"]["temperature_c"]


def test_bindings_without_a_function_null_that_field_only():
    class OldBindings:
        """The fake, as an nvidia-ml-py too old to have nvmlDeviceGetTotalEnergyConsumption."""

        def __init__(self, inner: FakeNvml) -> None:
            self._inner = inner

        def ensure(self):
            self._inner.ensure()
            return self

        def __getattr__(self, name: str):
            if name == "nvmlDeviceGetTotalEnergyConsumption":
                raise AttributeError(name)
            return getattr(self._inner, name)

    backend = NvmlBackend(nvml=OldBindings(FakeNvml([h100()])), clock=StepClock())
    backend.open()
    d = backend.read_fast(0.0)[0]
    assert d["status"] == "ok" and d["energy_j"] is None and d["power_w"] == 300.0
    assert "no nvmlDeviceGetTotalEnergyConsumption" in d["unavailable"]["energy_j"]


def test_a_gpu_lost_mid_run_is_marked_lost_while_others_keep_updating_and_it_comes_back():
    gpus = [h100(), h100(uuid="GPU-11111111-aaaa-bbbb-cccc-dddddddddddd")]
    fake = FakeNvml(gpus)
    clock = StepClock()
    backend = opened(fake, clock)
    assert [d["status"] for d in backend.read_fast(0.0)] == ["ok", "ok"]

    gpus[1]["errors"]["*"] = GPU_IS_LOST
    lost = backend.read_fast(1.0)
    assert lost[0]["status"] == "ok" and lost[0]["utilization_gpu_percent"] == 97
    assert lost[1]["status"] == "lost"
    assert lost[1]["uuid"] == "GPU-11111111-aaaa-bbbb-cccc-dddddddddddd"
    assert lost[1]["utilization_gpu_percent"] is None
    assert lost[1]["unavailable"]["utilization_gpu_percent"].startswith("GPU is lost")
    assert backend.read_slow(1.0)[0]["index"] == 0 and len(backend.read_slow(1.0)) == 1

    gpus[0]["util_gpu"] = 55
    gpus[1]["errors"].clear()  # the GPU answers again
    clock.now += 1.0
    assert backend.read_fast(2.0)[1]["status"] == "lost"  # not asked again before the retry time
    clock.now += nvml_backend.LOST_RETRY_S
    back = backend.read_fast(3.0)
    assert back[0]["utilization_gpu_percent"] == 55
    assert back[1]["status"] == "ok" and back[1]["utilization_gpu_percent"] == 97
    assert nvml_backend.LOST_RETRY_S < 15.0  # recovery promise: back within 15 s


def test_a_gpu_lost_before_start_is_listed_lost_with_its_reason():
    fake = FakeNvml([h100(), h100(errors={"*": GPU_IS_LOST})])
    backend = opened(fake)
    assert backend.status == "ok"
    info = backend.device_info()
    assert info[1]["status"] == "lost" and info[1]["cores"] is None
    assert info[0]["status"] == "ok" and info[0]["cores"] == 16896
    assert [d["status"] for d in backend.read_fast(0.0)] == ["ok", "lost"]


@pytest.mark.parametrize(
    "code,words",
    [(DRIVER_NOT_LOADED, "driver is not loaded"), (LIBRARY_NOT_FOUND, "libnvidia-ml.so.1")],
)
def test_no_library_or_driver_is_a_no_gpu_state_with_the_reason(code, words):
    backend = opened(FakeNvml([], init_error=code))
    assert backend.status == "no_gpu"
    assert words in backend.reason
    assert backend.read_fast(0.0) == [] and backend.device_info() == []


def test_zero_gpus_is_a_no_gpu_state():
    backend = opened(FakeNvml([]))
    assert backend.status == "no_gpu" and "no GPUs" in backend.reason


def test_cuda_driver_version_falls_back_to_the_v1_call():
    fake = FakeNvml([h100()])
    fake.system_errors["nvmlSystemGetCudaDriverVersion_v2"] = FUNCTION_NOT_FOUND
    assert opened(fake).system["cuda_driver_version"] == "12.4"


def test_library_initialises_lazily_once_and_keeps_its_failure(monkeypatch):
    calls = []

    def failing_init():
        calls.append(1)
        raise pynvml.NVMLError(DRIVER_NOT_LOADED)

    monkeypatch.setattr(pynvml, "nvmlInit", failing_init)
    lib = Nvml()
    assert calls == []  # nothing at construction
    for _ in range(3):
        with pytest.raises(NoGpu, match="driver is not loaded"):
            lib.ensure()
    assert len(calls) == 1
    lib.reset()
    monkeypatch.setattr(pynvml, "nvmlInit", lambda: calls.append(2))
    shutdowns = []
    monkeypatch.setattr(pynvml, "nvmlShutdown", lambda: shutdowns.append(1))
    assert lib.ensure() is pynvml
    assert lib.ensure() is pynvml and calls == [1, 2]
    lib.shutdown()
    lib.shutdown()
    assert shutdowns == [1]


def test_library_init_is_thread_safe(monkeypatch):
    import threading
    import time

    calls = []

    def slow_init():
        calls.append(1)
        time.sleep(0.05)

    monkeypatch.setattr(pynvml, "nvmlInit", slow_init)
    monkeypatch.setattr(pynvml, "nvmlShutdown", lambda: None)
    lib = Nvml()
    threads = [threading.Thread(target=lib.ensure) for _ in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert calls == [1]
    lib.shutdown()


@pytest.mark.integration
def test_importing_the_package_does_not_load_nvml():
    import subprocess
    import sys

    code = "import gpu_widgets, gpu_widgets.backends, gpu_widgets.sampling.sampler, sys; print('pynvml' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "False"


def test_every_nvml_error_code_gets_words():
    for code in [c for name, c in vars(pynvml).items() if name.startswith("NVML_ERROR_")]:
        failure = classify(pynvml.NVMLError(code))
        assert failure.code == code and failure.reason and failure.kind


def test_an_incomplete_process_list_is_null_not_partial():
    fake = FakeNvml([h100(procs=[(4_300_000, GIB)], errors={"nvmlDeviceGetComputeRunningProcesses_v3": UNKNOWN})])
    d = opened(fake).read_slow(0.0)[0]
    assert d["processes"] is None and "unknown error" in d["unavailable"]["processes"]


def test_a_gpu_without_the_graphics_query_still_lists_compute_processes():
    fake = FakeNvml([h100(procs=[(4_300_000, GIB)], errors={"nvmlDeviceGetGraphicsRunningProcesses_v3": NOT_SUPPORTED,
                                                             "nvmlDeviceGetGraphicsRunningProcesses_v2": NOT_SUPPORTED})])
    d = opened(fake).read_slow(0.0)[0]
    assert [p["pid"] for p in d["processes"]] == [4_300_000] and "processes" not in d["unavailable"]


def test_a_pid_in_both_lists_appears_once_with_the_larger_memory():
    fake = FakeNvml([h100(procs=[(4_300_000, GIB)], graphics_procs=[(4_300_000, 2 * GIB), (4_300_002, None)])])
    procs = opened(fake).read_slow(0.0)[0]["processes"]
    assert [(p["pid"], p["used_memory_bytes"]) for p in procs] == [(4_300_000, 2 * GIB), (4_300_002, None)]


def test_process_details_the_os_refuses_are_null_with_reasons(monkeypatch):
    from gpu_widgets.backends.processes import ProcessDescriber

    def denied(self):
        raise psutil.AccessDenied(self.pid)

    monkeypatch.setattr(psutil.Process, "cmdline", denied)
    monkeypatch.setattr(psutil.Process, "username", denied)
    details = ProcessDescriber().describe(os.getpid())
    assert details["name"] == psutil.Process().name()
    assert details["user"] is None and details["command"] is None
    assert details["unavailable"] == {"user": "access denied by the operating system",
                                      "command": "access denied by the operating system"}


def test_a_process_that_ends_between_listing_and_lookup(monkeypatch):
    from gpu_widgets.backends.processes import ProcessDescriber

    def gone(self):
        raise psutil.NoSuchProcess(self.pid)

    monkeypatch.setattr(psutil.Process, "name", gone)
    details = ProcessDescriber().describe(os.getpid())
    assert details["name"] is None and details["unavailable"]["name"] == "process ended"
    missing = ProcessDescriber().describe(4_300_000)
    assert missing["user"] is None and "not visible here" in missing["unavailable"]["user"]


def test_a_gpus_process_list_is_reused_while_unchanged_and_rebuilt_when_it_changes(monkeypatch):
    from gpu_widgets.backends import processes

    clock = [1000.0]
    monkeypatch.setattr(processes.time, "monotonic", lambda: clock[0])
    looked_up = []
    real_look_up = processes._look_up
    monkeypatch.setattr(processes, "_look_up", lambda pid: looked_up.append(pid) or real_look_up(pid))
    describer = processes.ProcessDescriber()
    me = os.getpid()

    first = describer.entries([(me, 1 * GIB)])
    assert first[0]["pid"] == me and first[0]["user"] is not None and looked_up == [me]
    assert describer.entries([(me, 1 * GIB)]) is first  # the same list while the pairs stay the same
    changed = describer.entries([(me, 2 * GIB)])  # more memory: a new entry, the pid's details reused
    assert changed is not first and changed[0]["used_memory_bytes"] == 2 * GIB and looked_up == [me]

    clock[0] += processes.REVALIDATE_S + 1  # old enough: rebuilt, and the pid is checked again
    again = describer.entries([(me, 1 * GIB)])
    assert again is not first and again == first

    describer.forget_except(set())  # the process left every GPU: nothing about it is kept
    describer.entries([(me, 1 * GIB)])
    assert looked_up == [me, me]
