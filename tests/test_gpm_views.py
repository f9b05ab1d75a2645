"""Issue 15, the views: who looks asks for GPM (monitor, dashboard, %%gpuwatch, a Prometheus scrape),
SM activity shown in the monitor's header, chart and saved run and in the %%gpuwatch summary, the
small-kernels advice, and the DCGM profiling series and pci_bus_id of the export.

The simulated backend's ``small_kernels`` episode is the busy-but-idle GPU: busy ~98 %, SM active ~6 %.
"""
from __future__ import annotations

import asyncio
import json
import re
import time

import pytest
from prometheus_client.parser import text_string_to_metric_families

from gpu_widgets import GpuDashboard, TrainingMonitor
from gpu_widgets.backends import SimulatedBackend, parse_faults
from gpu_widgets.backends.nvml.backend import NvmlBackend
from gpu_widgets.export.exposition import SCRAPE_GPM_OWNER, Exposition
from gpu_widgets.magic.summary import summarize
from gpu_widgets.runs.gpu_trace import GpuTrace
from gpu_widgets.sampling import sampler as sampler_module
from gpu_widgets.sampling.sampler import Sampler

from .test_gpm import BUSY_GPU, calls, reset_calls
from .widget_helpers import FixedBackend, run_dir, shared_simulated  # noqa: F401

ADVICE = re.compile(r"GPU 0: busy (\d+) % but SMs active (\d+) %: the kernels are too small to fill this GPU "
                    r"\(batch size, fusing, CUDA graphs\)")
SMALL = "small_kernels:0@0-100000"


def sampler_for(faults: str = SMALL, n_gpus: int = 1) -> Sampler:
    """A sampler driven by hand: ``read`` plays its slow thread, then ticks once."""
    backend = SimulatedBackend(n_gpus=n_gpus, seed=1, faults=parse_faults(faults), t0=time.time() - 5)
    backend.open()
    return Sampler(backend, interval_s=1.0)


def read(sampler: Sampler, times: int = 1) -> None:
    for _ in range(times):
        sampler._read_slow()  # what the slow thread does: GPM only while someone looks
        sampler.tick()


def askers(sampler: Sampler) -> set[str]:
    now = sampler.clock.monotonic()
    return {owner.split(":")[0] for owner, until in sampler._gpm_leases.items() if until is None or until > now}


def monitor_run(sampler: Sampler, steps: int = 8) -> TrainingMonitor:
    mon = TrainingMonitor("t", display=False, run_log=False, sampler=sampler, gpus="all")
    for i in range(steps):
        mon.log(loss=1.0 / (i + 1))
        read(sampler)
    mon.refresh()
    return mon


# -- the monitor ----------------------------------------------------------------------------------
def test_a_running_monitor_asks_for_gpm_and_shows_sm_active_with_the_small_kernels_advice():
    sampler = sampler_for()
    read(sampler)
    assert not sampler.gpm_wanted and sampler.latest["devices"][0]["sm_active_percent"] is None
    mon = monitor_run(sampler)
    assert askers(sampler) == {"monitor"}
    head = mon.parts.view.header.value
    sm = re.search(r'<span class="gpuw-l">SM active</span> <span class="gpuw-v">(\d+) %</span>', head)
    busy = re.search(r'<span class="gpuw-l">busy</span> <span class="gpuw-v">(\d+) %</span>', head)
    assert sm and busy, head
    assert int(busy.group(1)) >= 95 and int(sm.group(1)) <= 10
    assert head.index("gpuw-l\">busy") < head.index("gpuw-l\">SM active")  # beside busy, after it
    tip = ADVICE.search(head)
    assert tip, head
    assert int(tip.group(1)) >= 90 and int(tip.group(2)) <= 10
    assert "SM active (%)" in mon.gpu_chart_titles and "Tensor active (%)" in mon.gpu_chart_titles
    line = mon.parts.view.charts["gpu_sm_active"].lines["GPU 0"]
    assert len(line.y) and max(line.y) <= 10
    mon.finish()
    assert not sampler.gpm_wanted  # released when the run stops


class _GpmFixed(FixedBackend):
    """Fixed GPUs whose slow read carries the GPM figures the test gives (as the slow thread would)."""

    def read_slow(self, t: float) -> list[dict]:
        gpm = ("sm_active_percent", "sm_occupancy_percent", "tensor_active_percent", "dram_active_percent")
        return [{**part, **{f: d.get(f) for f in gpm}}
                for part, d in zip(super().read_slow(t), self.devices)]


@pytest.mark.parametrize("busy,sm,advised", [(100, 8.0, True), (97, 85.0, False), (40, 8.0, False)])
def test_the_advice_needs_busy_high_and_sm_activity_low(busy, sm, advised):
    mon = monitor_run(Sampler(_GpmFixed({"utilization_gpu_percent": busy, "sm_active_percent": sm})))
    head = mon.parts.view.header.value
    assert f'<span class="gpuw-l">SM active</span> <span class="gpuw-v">{sm:.0f} %</span>' in head, head
    said = "GPU 0: busy 100 % but SMs active 8 %: the kernels are too small to fill this GPU " \
           "(batch size, fusing, CUDA graphs)."
    assert (said in head) is advised, head
    assert ("kernels are too small" in head) is advised
    mon.finish()


def test_without_sm_activity_there_is_no_advice_and_no_empty_sm_cell_or_chart():
    sampler = sampler_for()
    sampler.want_gpm = lambda *a, **k: None  # GPM never turns on: as a GPU without it
    mon = monitor_run(sampler)
    head = mon.parts.view.header.value
    assert re.search(r'<span class="gpuw-l">busy</span> <span class="gpuw-v">(9\d|100) %</span>', head), head
    assert "SM active" not in head and "kernels are too small" not in head
    assert "gpu_sm_active" not in mon.parts.view.charts and "gpu_util" in mon.parts.view.charts
    mon.finish()


def test_a_saved_run_shows_sm_active_again_when_loaded(run_dir):  # noqa: F811
    sampler = sampler_for()
    mon = TrainingMonitor("saved", display=False, sampler=sampler, gpus="all")
    for i in range(8):
        mon.log(loss=1.0 / (i + 1))
        read(sampler)
    mon.finish()
    rows = [json.loads(line) for line in (mon.run_dir / "gpu.jsonl").read_text().splitlines()]
    assert any(r.get("sm_active_percent") is not None and r["sm_active_percent"] <= 10 for r in rows), rows[-1]
    loaded = TrainingMonitor.load(mon.run_dir)
    head = loaded.parts.view.header.value
    assert re.search(r'<span class="gpuw-l">SM active</span> <span class="gpuw-v">\d %</span>', head), head
    assert ADVICE.search(head)
    assert "gpu_sm_active" in loaded.parts.view.charts


# -- the dashboard and %%gpuwatch -------------------------------------------------------------------
def test_a_live_dashboard_asks_while_it_runs_and_draws_sm_active():
    sampler = sampler_for()
    dash = GpuDashboard(sampler=sampler, display=False, gpus="all", refresh_s=60)
    try:
        assert askers(sampler) == {"dashboard"}
        until = sampler._gpm_leases[next(iter(sampler._gpm_leases))]
        assert until - sampler.clock.monotonic() > 170  # 3 refreshes of 60 s: a slow dashboard keeps it
        read(sampler, 3)
        dash.refresh()
        ys = dash._view.charts["sm_active"].lines["GPU 0"].y
        assert len(ys) and max(ys) <= 10
        assert "tensor_active" not in dash._view.charts  # the catalogue keeps it to sidebar, monitor, summary
    finally:
        dash.stop()
    assert not sampler.gpm_wanted


def test_the_cell_magic_asks_while_the_cell_runs_and_summarises_sm_active(shared_simulated, monkeypatch, capsys):
    from IPython.testing.globalipapp import get_ipython

    monkeypatch.setenv("GPU_WIDGETS_SIMULATED_GPUS", "1")
    monkeypatch.setenv("GPU_WIDGETS_SIMULATED_FAULTS", SMALL)
    ip = get_ipython()
    ip.run_line_magic("load_ext", "gpu_widgets")
    seen: list[set[str]] = []

    def sm_known() -> bool:
        latest = sampler_module._shared.latest
        return bool(latest) and latest["devices"][0]["sm_active_percent"] is not None

    ip.user_ns.update(_sm_known=sm_known, _note=lambda: seen.append(askers(sampler_module._shared)))
    result = ip.run_cell("%%gpuwatch --interval 0.1 --quiet\nimport time\nt = time.monotonic()\n"
                         "while not _sm_known() and time.monotonic() - t < 20:\n    time.sleep(0.1)\n"
                         "time.sleep(1.0)\n_note()", store_history=False)
    assert result.success
    assert seen == [{"gpuwatch-cell"}]
    out = capsys.readouterr().out
    assert re.search(r"SM active mean \d % \(peak \d+ %\)", out), out
    [gpu] = ip.user_ns["_gpuwatch"]["gpus"]
    assert gpu["means"]["sm_active"] <= 10 and gpu["util_mean_percent"] >= 90
    assert not sampler_module._shared.gpm_wanted  # returned with the cell


def test_the_summary_text_gives_the_mean_sm_activity():
    sampler = sampler_for()
    sampler.want_gpm("test", lease_s=None)
    trace = GpuTrace(t0=time.time())
    for _ in range(5):
        read(sampler)
        trace.add_snapshot(sampler.latest)
    text, data = summarize(trace, 5.0, 1.0)
    assert re.search(r"GPU 0 .*busy mean (9\d|100) % \(peak (9\d|100) %\) · SM active mean \d % \(peak \d+ %\)", text), text
    assert data["gpus"][0]["means"]["sm_active"] <= 10


# -- the export --------------------------------------------------------------------------------------
class _Service:
    """What Exposition.scrape reads of a GpuService: a ready sampler and its spec cards."""

    def __init__(self, sampler: Sampler) -> None:
        self.sampler, self.ready, self.backend_choice = sampler, True, "simulated"

    def latest(self):
        return self.sampler.latest

    def devices(self):
        return self.sampler.backend.device_info()

    def status(self):
        return {"backend": "simulated", "status": "ok", "sample_age_s": 0.0}


def families(text: bytes) -> dict:
    return {f.name: f for f in text_string_to_metric_families(text.decode())}


PROF = ("DCGM_FI_PROF_SM_ACTIVE", "DCGM_FI_PROF_SM_OCCUPANCY", "DCGM_FI_PROF_PIPE_TENSOR_ACTIVE",
        "DCGM_FI_PROF_DRAM_ACTIVE")


def test_a_scrape_asks_for_five_minutes_and_exports_fractions_with_the_pci_bus_id():
    sampler = sampler_for(faults="small_kernels:0@0-100000", n_gpus=2)
    service = _Service(sampler)
    exposition = Exposition("node-1")
    read(sampler)
    fam = families(exposition.scrape(service))
    assert not any(name in fam for name in PROF)  # nobody had asked: absent, never 0
    gaps = {(s.labels["gpu"], s.labels["field"]) for s in fam["gpu_widgets_field_unavailable"].samples}
    assert ("0", "sm_active_percent") in gaps
    assert askers(sampler) == {SCRAPE_GPM_OWNER}
    until = sampler._gpm_leases[SCRAPE_GPM_OWNER]
    assert until - sampler.clock.monotonic() > 290
    read(sampler)
    fam = families(exposition.scrape(service))
    dev = {d["index"]: d for d in sampler.latest["devices"]}
    for name, field in zip(PROF, ("sm_active_percent", "sm_occupancy_percent", "tensor_active_percent",
                                  "dram_active_percent")):
        assert fam[name].type == "gauge"
        got = {s.labels["gpu"]: s.value for s in fam[name].samples}
        assert got == {"0": pytest.approx(dev[0][field] / 100), "1": pytest.approx(dev[1][field] / 100)}, name
        assert all(0 <= v <= 1 for v in got.values())
    assert fam["DCGM_FI_PROF_SM_ACTIVE"].samples[0].value <= 0.10  # GPU 0's tiny kernels
    buses = {s.labels["gpu"]: s.labels["pci_bus_id"] for s in fam["DCGM_FI_DEV_GPU_UTIL"].samples}
    assert buses == {"0": "00000000:18:00.0", "1": "00000000:2A:00.0"}
    again = SimulatedBackend(n_gpus=2, seed=7)
    again.open()
    assert [d["pci_bus_id"] for d in again.device_info()] == ["00000000:18:00.0", "00000000:2A:00.0"]  # stable


def test_the_nvml_backend_reads_the_pci_bus_id_as_nvidia_smi_prints_it(in_process_fake_nvml):
    in_process_fake_nvml({"gpus": [{}, {"pci_bus_id": "00000000:9B:00.0"}]})
    reset_calls()
    b = NvmlBackend()
    b.open()
    try:
        assert [d["pci_bus_id"] for d in b.device_info()] == ["00000000:18:00.0", "00000000:9B:00.0"]
        assert calls("nvmlDeviceGetPciInfo_v3") == 2
        b.device_info()
        assert calls("nvmlDeviceGetPciInfo_v3") == 2  # a spec card: read once
    finally:
        b.close()
    in_process_fake_nvml({"gpus": [{"error": {"nvmlDeviceGetPciInfo_v3": 3}}]})  # 3: not supported
    b = NvmlBackend()
    b.open()
    try:
        [info] = b.device_info()
        assert info["pci_bus_id"] is None and info["unavailable"]["pci_bus_id"] == "not supported on this GPU"
    finally:
        b.close()


GPM_SERVER = {"backend": "nvml", "interval_s": 0.1, "slow_interval_s": 0.1, "hostname": "node-9"}


@pytest.mark.parametrize("gw_config,fake_nvml_config",
                         [(GPM_SERVER, {"gpus": [{**BUSY_GPU, "pci_bus_id": "00000000:C1:00.0"}]})])
async def test_the_server_scrape_asks_and_exports_the_driver_figures(in_process_fake_nvml, jp_fetch, jp_serverapp):
    reset_calls()
    deadline = time.monotonic() + 30
    while True:
        response = await jp_fetch("gpu-widgets", "metrics")
        fam = families(response.body)
        if "DCGM_FI_PROF_SM_ACTIVE" in fam:
            break
        assert time.monotonic() < deadline, response.body.decode()
        await asyncio.sleep(0.1)
    assert calls("nvmlGpmSampleGet") > 0  # the scrape turned GPM on
    value = {name: fam[name].samples[0].value for name in PROF}
    assert value == {"DCGM_FI_PROF_SM_ACTIVE": 0.87, "DCGM_FI_PROF_SM_OCCUPANCY": 0.41,
                     "DCGM_FI_PROF_PIPE_TENSOR_ACTIVE": 0.63, "DCGM_FI_PROF_DRAM_ACTIVE": 0.30}
    labels = fam["DCGM_FI_PROF_SM_ACTIVE"].samples[0].labels
    assert labels["pci_bus_id"] == "00000000:C1:00.0" and labels["Hostname"] == "node-9"
    service = jp_serverapp.web_app.settings["gpu_widgets_service"]
    assert SCRAPE_GPM_OWNER in service.sampler._gpm_leases


@pytest.mark.integration
def test_the_standalone_exporter_turns_gpm_on_when_scraped():
    from .test_exporter_cli import Exporter

    e = Exporter("--interval-s", "0.2")
    try:
        first = e.families()
        assert "DCGM_FI_PROF_SM_ACTIVE" not in first  # nobody had looked: not read, absent
        deadline = time.monotonic() + 30  # the next two slow reads (2 s apart) give the figures
        while "DCGM_FI_PROF_SM_ACTIVE" not in (fam := e.families()):
            assert time.monotonic() < deadline, "the scrapes never turned GPM on"
            time.sleep(0.3)
        values = [s.value for s in fam["DCGM_FI_PROF_SM_ACTIVE"].samples]
        assert len(values) == 2 and all(0 <= v <= 1 for v in values)
        assert [s.labels["pci_bus_id"] for s in fam["DCGM_FI_PROF_SM_ACTIVE"].samples] == [
            "00000000:18:00.0", "00000000:2A:00.0"]
        assert e.stop() == 0
    finally:
        e.kill()
