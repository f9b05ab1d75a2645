"""A sample as Prometheus metric families: dcgm-exporter's names, units and labels, and our own.

The DCGM families are named, typed and described as dcgm-exporter's default counters, in its
units (framebuffer in MiB, power in W, energy in mJ, clocks in MHz, utilization in %), with its
labels, so Grafana dashboards and PromQL written for it work unchanged. What DCGM's defaults lack
(throttle reasons, per-process memory, the exporter's health) is under ``gpu_widgets_*``.

A field that was not read (null in the sample) gives no series at all: a made-up 0 would read as
"idle" or "cold" on a dashboard. ``gpu_widgets_field_unavailable`` says which fields are missing.
"""
from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import Any, NamedTuple

from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, InfoMetricFamily, Metric

from ..metrics import throttle
from ..backends.pid_match import pid_label

MIB = 1 << 20

# dcgm-exporter's labels, in its spelling, on every per-GPU series.
DEVICE_LABELS: tuple[str, ...] = ("gpu", "UUID", "pci_bus_id", "device", "modelName", "Hostname")
PROCESS_LABELS: tuple[str, ...] = ("pid", "user", "kernel_id", "notebook_path")
OTHER_REASON = "other"  # throttle bits this version has no name for
# Per-process series per GPU: the largest by GPU memory (the sample lists them in that order).
# 64 GPUs x 1000 processes made a 16.5 MB scrape that took 3.4 s, against Prometheus's 4 s
# default timeout; gpu_widgets_process_series_omitted counts the rest.
PROCESS_SERIES_MAX = 32


def exported_processes(procs: list[Mapping[str, Any]] | None) -> list[Mapping[str, Any]] | None:
    """The processes of one GPU that get a series (callers attribute and redact only these)."""
    return None if procs is None else procs[:PROCESS_SERIES_MAX]


class DcgmField(NamedTuple):
    name: str
    type: str  # "gauge" or "counter", as in dcgm-exporter's default-counters.csv
    help: str
    field: str  # the sample field it comes from (metrics/fields.py)
    convert: Callable[[Any], float]


def _same(value: Any) -> float:
    return value


def _whole_mib(value: Any) -> float:
    return value // MIB  # DCGM reports whole MiB


def _fraction(value: Any) -> float:
    return value / 100.0  # our percents as DCGM's ratios


def _millijoules(value: Any) -> float:
    return round(value * 1000)  # NVML counts whole mJ; undo the float division of joules


DCGM_FIELDS: tuple[DcgmField, ...] = (
    DcgmField("DCGM_FI_DEV_SM_CLOCK", "gauge", "SM clock frequency (in MHz).", "sm_clock_mhz", _same),
    DcgmField("DCGM_FI_DEV_MEM_CLOCK", "gauge", "Memory clock frequency (in MHz).", "memory_clock_mhz", _same),
    DcgmField("DCGM_FI_DEV_GPU_TEMP", "gauge", "GPU temperature (in C).", "temperature_c", _same),
    DcgmField("DCGM_FI_DEV_POWER_USAGE", "gauge", "Power draw (in W).", "power_w", _same),
    DcgmField("DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION", "counter", "Total energy consumption since boot (in mJ).",
              "energy_j", _millijoules),
    DcgmField("DCGM_FI_DEV_GPU_UTIL", "gauge", "GPU utilization (in %).", "utilization_gpu_percent", _same),
    DcgmField("DCGM_FI_DEV_MEM_COPY_UTIL", "gauge", "Memory utilization (in %).", "utilization_memory_percent", _same),
    DcgmField("DCGM_FI_DEV_FB_FREE", "gauge", "Framebuffer memory free (in MiB).", "memory_free_bytes", _whole_mib),
    DcgmField("DCGM_FI_DEV_FB_USED", "gauge", "Framebuffer memory used (in MiB).", "memory_used_bytes", _whole_mib),
    # Profiling fields: DCGM reads them from the same performance counters as NVML's GPM, and gives
    # them as fractions (0-1), not percents. Absent without GPM (pre-Hopper) and while nothing asks.
    DcgmField("DCGM_FI_PROF_SM_ACTIVE", "gauge",
              "Fraction of time the SMs had at least one warp assigned, averaged over all SMs (0-1).",
              "sm_active_percent", _fraction),
    DcgmField("DCGM_FI_PROF_SM_OCCUPANCY", "gauge",
              "Resident warps as a fraction of the most the SMs can hold (0-1).", "sm_occupancy_percent", _fraction),
    DcgmField("DCGM_FI_PROF_PIPE_TENSOR_ACTIVE", "gauge",
              "Fraction of time the tensor pipes were busy, any precision (0-1).", "tensor_active_percent", _fraction),
    DcgmField("DCGM_FI_PROF_DRAM_ACTIVE", "gauge",
              "Device memory bandwidth used, as a fraction of its peak (0-1).", "dram_active_percent", _fraction),
)

# dcgm-exporter writes its counters without the ``_total`` suffix that prometheus-client adds
# (an OpenMetrics rule); dashboards query the bare names, so the exposition keeps them bare.
BARE_COUNTERS: tuple[str, ...] = tuple(f.name for f in DCGM_FIELDS if f.type == "counter")


@dataclass(frozen=True)
class Health:
    """The exporter's own state at the moment of a scrape."""

    version: str
    backend: str  # "" while the backend opens
    simulated: bool
    hostname: str
    up: bool  # a backend with GPUs answers and the newest sample is current
    status: str  # the API's status: starting, ok, no_gpu, stale
    sample_age_s: float | None
    sample_timestamp: float | None
    samples: int | None
    skipped_ticks: int | None


def device_labels(dev: Mapping[str, Any], info: Mapping[str, Any], hostname: str) -> list[str]:
    """The DCGM label values of one GPU; an unknown value is "" (Prometheus reads it as no label)."""
    index = dev["index"]
    return [
        str(index),
        dev.get("uuid") or info.get("uuid") or "",
        info.get("pci_bus_id") or "",
        f"nvidia{index}",
        dev.get("name") or info.get("name") or "",
        hostname,
    ]


def _dcgm_family(spec: DcgmField) -> Metric:
    if spec.type == "counter":
        return Metric(spec.name, spec.help, "counter")  # samples added by name, without _total
    return GaugeMetricFamily(spec.name, spec.help, labels=DEVICE_LABELS)


def device_families(
    devices: Iterable[Mapping[str, Any]],
    infos: Mapping[int, Mapping[str, Any]],
    hostname: str,
    processes: Mapping[int, list[Mapping[str, Any]] | None] | None = None,
) -> list[Metric]:
    """Every per-GPU family of one sample. ``infos`` are the spec cards by index (for the PCI bus
    id); ``processes`` (by index) replaces the sample's process lists when given: attributed to
    kernels and redacted by the caller, cut by ``exported_processes`` first (only those are
    exported; the sample's own list counts the rest)."""
    dcgm = [(spec, _dcgm_family(spec)) for spec in DCGM_FIELDS]
    lost = GaugeMetricFamily("gpu_widgets_gpu_lost", "1 when the GPU stopped answering (its readings are absent).",
                             labels=DEVICE_LABELS)
    missing = GaugeMetricFamily(
        "gpu_widgets_field_unavailable",
        "1 for each sample field that could not be read in the latest sample (the API's unavailable map says why).",
        labels=(*DEVICE_LABELS, "field"))
    throttled = GaugeMetricFamily(
        "gpu_widgets_throttle_active",
        "1 while this clock throttle reason holds the GPU's clocks down, else 0.",
        labels=(*DEVICE_LABELS, "reason"))
    memory = GaugeMetricFamily(
        "gpu_widgets_process_gpu_memory_bytes",
        "GPU memory used by a process, bytes. user is empty for another user's process unless "
        "GpuWidgets.show_other_users_processes; kernel_id and notebook_path name the notebook that owns it.",
        labels=(*DEVICE_LABELS, *PROCESS_LABELS))
    omitted = GaugeMetricFamily(
        "gpu_widgets_process_series_omitted",
        f"GPU processes without a gpu_widgets_process_gpu_memory_bytes series: only the {PROCESS_SERIES_MAX} "
        "largest by GPU memory of each GPU get one.", labels=DEVICE_LABELS)
    for dev in devices:
        labels = device_labels(dev, infos.get(dev["index"], {}), hostname)
        lost.add_metric(labels, 1.0 if dev.get("status") == "lost" else 0.0)
        for field in sorted(dev.get("unavailable") or {}):
            if dev.get(field) is None:
                missing.add_metric([*labels, field], 1.0)
        for spec, family in dcgm:
            value = dev.get(spec.field)
            if value is None:
                continue
            if spec.type == "counter":
                family.add_sample(spec.name, dict(zip(DEVICE_LABELS, labels)), spec.convert(value))
            else:
                family.add_metric(labels, spec.convert(value))
        _add_throttle(throttled, labels, dev.get("throttle_reasons"))
        listed = dev.get("processes")
        procs = exported_processes(listed if processes is None else processes.get(dev["index"]))
        for proc in procs or ():
            if proc.get("used_memory_bytes") is not None:
                memory.add_metric([*labels, *process_labels(proc)], float(proc["used_memory_bytes"]))
        if listed is not None:
            omitted.add_metric(labels, float(max(0, len(listed) - len(procs or ()))))
    families = [family for _, family in dcgm] + [lost, missing, throttled, memory, omitted]
    return [f for f in families if f.samples]


def _add_throttle(family: GaugeMetricFamily, labels: list[str], mask: int | None) -> None:
    if mask is None:
        return  # not read: absent, not "no reason"
    for bit, name, _ in throttle.REASONS:
        family.add_metric([*labels, name], 1.0 if mask & bit else 0.0)
    family.add_metric([*labels, OTHER_REASON], 1.0 if mask & ~throttle.KNOWN_MASK else 0.0)


def process_labels(proc: Mapping[str, Any]) -> list[str]:
    return [pid_label(proc), proc.get("user") or "", proc.get("kernel_id") or "", proc.get("notebook_path") or ""]


def health_families(health: Health) -> list[Metric]:
    """The exporter's health: present on every scrape, also while the sampler starts."""
    info = InfoMetricFamily(
        "gpu_widgets", "gpu-widgets version and backend; simulated=\"true\" when the GPUs are simulated.",
        labels=("version", "backend", "simulated", "Hostname"))
    info.add_metric([health.version, health.backend, "true" if health.simulated else "false", health.hostname], {})
    up = GaugeMetricFamily("gpu_widgets_up", "1 when GPUs are sampled and the latest sample is current, else 0 "
                           "(starting, no GPU, or the sampler is stuck in a driver call).", value=1.0 if health.up else 0.0)
    status = GaugeMetricFamily("gpu_widgets_status", "1 for the sampler's current status (as the API's status).",
                               labels=("status",))
    status.add_metric([health.status], 1.0)
    out: list[Metric] = [info, up, status]
    if health.sample_age_s is not None:
        out.append(GaugeMetricFamily("gpu_widgets_last_sample_age_seconds",
                                     "Seconds since the latest sample was taken.", value=health.sample_age_s))
    if health.sample_timestamp is not None:
        out.append(GaugeMetricFamily("gpu_widgets_last_sample_timestamp_seconds",
                                     "Unix time of the latest sample.", value=health.sample_timestamp))
    if health.samples is not None:
        out.append(CounterMetricFamily("gpu_widgets_samples", "Samples taken since the sampler started.",
                                       value=health.samples))
    if health.skipped_ticks is not None:
        out.append(CounterMetricFamily(
            "gpu_widgets_skipped_ticks", "Sampling ticks missed because a read took longer than the interval "
            "(slow or hanging driver calls).", value=health.skipped_ticks))
    return out


KERNEL_LABELS = ("kernel_id", "notebook_path", "gpu")


def kernel_families(rows: Iterable[Mapping[str, Any]]) -> list[Metric]:
    """Per kernel of this server and GPU (rows from server/gpu_activity.py): the memory its processes
    hold and how long the GPU has gone unused by them. The kernels are the server's own, so their
    notebook paths are shown as in the process families for the server's own processes."""
    idle = GaugeMetricFamily(
        "gpu_widgets_kernel_gpu_idle_seconds",
        "Seconds since a GPU was last busy with the processes of this kernel (or since they were first seen there).",
        labels=KERNEL_LABELS)
    memory = GaugeMetricFamily(
        "gpu_widgets_kernel_gpu_memory_bytes", "GPU memory held by the processes of this kernel, bytes.",
        labels=KERNEL_LABELS)
    for row in rows:
        labels = [row["kernel_id"], row.get("notebook_path") or "", str(row["gpu"])]
        idle.add_metric(labels, float(row["idle_s"]))
        memory.add_metric(labels, float(row["memory_bytes"]))
    return [idle, memory]
