"""Plain-text rendering of snapshots and device info for the terminal."""
from __future__ import annotations

from typing import Any

from ..sampling.stall import STALE, stale_text
from ..metrics.throttle import LABELS, SLOWDOWNS, names_from_mask
from ..backends.pid_match import pid_label

GIB = float(1 << 30)
NA = "n/a"
READING = "reading…"  # asked for but not read yet (a GPM figure needs two samples): not "n/a"


def _gpm_pct(d: dict[str, Any], field: str) -> str:
    value = d.get(field)
    if value is None and str((d.get("unavailable") or {}).get(field, "")).startswith("not read yet"):
        return READING
    return _pct(value)


def _pct(v: Any) -> str:
    return NA if v is None else f"{v:.0f}%"


def _gib(v: Any) -> str:
    return NA if v is None else f"{v / GIB:.1f}"


def _memory(d: dict[str, Any]) -> str:
    used, total = d.get("memory_used_bytes"), d.get("memory_total_bytes")
    if used is None and total is None:
        return NA
    return f"{_gib(used)}/{_gib(total)} GiB"


def _power(d: dict[str, Any]) -> str:
    p, lim = d.get("power_w"), d.get("power_limit_w")
    if p is None:
        return NA
    return f"{p:.0f}/{lim:.0f} W" if lim is not None else f"{p:.0f} W"


def _clocks(d: dict[str, Any]) -> str:
    sm, mem = d.get("sm_clock_mhz"), d.get("memory_clock_mhz")
    return f"{NA if sm is None else sm}/{NA if mem is None else mem} MHz"


def _throttle(d: dict[str, Any]) -> str:
    mask = d.get("throttle_reasons")  # a snapshot's reasons are NVML's bitmask: worded here
    if mask is None:
        return NA
    shown = [LABELS.get(r, r) + ("!" if r in SLOWDOWNS else "") for r in names_from_mask(mask)]
    return ", ".join(shown) or "none"


def header(snap: dict[str, Any], version: str) -> str:
    parts = [f"gpu-widgets {version}", f"backend {snap['backend'] or NA}"]
    if snap.get("driver_version"):
        parts.append(f"driver {snap['driver_version']}")
    if snap.get("cuda_driver_version"):
        parts.append(f"CUDA {snap['cuda_driver_version']}")
    line = " | ".join(parts)
    if snap["backend"] == "simulated":
        line += "\nSIMULATED GPUs: these are not real devices (GPU_WIDGETS_BACKEND=simulated)"
    return line


def render_snapshot(snap: dict[str, Any], version: str) -> str:
    lines = [header(snap, version)]
    if snap["status"] == STALE:
        lines.append(f"STALE: {stale_text(snap.get('sample_age_s'), snap.get('reason'))}")
        if not snap["devices"]:
            return "\n".join(lines)
        lines.append("The values below are from the last sample.")
    elif snap["status"] != "ok":
        lines.append(f"No NVIDIA GPU available: {snap.get('reason') or 'unknown reason'}")
        return "\n".join(lines)
    # "Util" is NVML's busy time (any kernel running); "SM act" and "Tensor" (GPM, Hopper or newer)
    # say how much of the GPU that kernel used: 100% busy with 8% SM active is a GPU mostly idle.
    rows = [("GPU", "Name", "Util", "SM act", "Tensor", "MemCtl", "Memory", "Temp", "Power", "Clocks SM/Mem",
             "Throttle")]
    for d in snap["devices"]:
        if d.get("status") == "lost":
            reason = next(iter((d.get("unavailable") or {}).values()), "GPU is lost")
            rows.append((str(d["index"]), d.get("name") or NA, "LOST", "", "", "", reason, "", "", "", ""))
            continue
        temp = d.get("temperature_c")
        rows.append(
            (
                str(d["index"]),
                d.get("name") or NA,
                _pct(d.get("utilization_gpu_percent")),
                _gpm_pct(d, "sm_active_percent"),
                _gpm_pct(d, "tensor_active_percent"),
                _pct(d.get("utilization_memory_percent")),
                _memory(d),
                NA if temp is None else f"{temp}C",
                _power(d),
                _clocks(d),
                _throttle(d),
            )
        )
    widths = [max(len(r[i]) for r in rows if len(r[i]) < 40 or i == 10) for i in range(len(rows[0]))]
    for r in rows:
        lines.append("  ".join(cell.ljust(w) for cell, w in zip(r, widths)).rstrip())
    for d in snap["devices"]:
        for p in d.get("processes") or ():
            mem = _gib(p.get("used_memory_bytes"))
            who = p.get("user") or "?"
            what = p.get("command") or p.get("name") or "?"
            sm = p.get("sm_percent")
            use = "" if sm is None else f"SM {sm:.0f}%  "
            pid = pid_label(p)
            if p["pid"] is None:
                what = (p.get("unavailable") or {}).get("name", "outside this container")
            elif p.get("used_memory_bytes") is None and (p.get("unavailable") or {}).get("used_memory_bytes"):
                what = f"{what[:60]}  ({p['unavailable']['used_memory_bytes']})"
            lines.append(f"  GPU {d['index']}  pid {pid:<8} {who:<10} {mem:>6} GiB  {use}{what[:80]}")
        for m in d.get("mig_instances") or ():
            lines.append(f"  GPU {d['index']}  MIG {m['index']} (GI {m.get('gpu_instance_id')}, CI "
                         f"{m.get('compute_instance_id')})  {_memory(m)}  SM act {_gpm_pct(m, 'sm_active_percent')}"
                         f"  pids {', '.join(map(str, m.get('pids') or ())) or '-'}")
    missing = sorted(
        {f"{k}: {v}" for d in snap["devices"] if d.get("status") != "lost" for k, v in (d.get("unavailable") or {}).items()}
    )
    if missing:
        lines.append("Unavailable: " + "; ".join(missing))
    return "\n".join(lines)


def render_info(system: dict[str, Any], devices: list[dict[str, Any]], backend: str) -> str:
    lines = [f"backend {backend} | driver {system.get('driver_version') or NA} | NVML {system.get('nvml_version') or NA}"
             f" | CUDA {system.get('cuda_driver_version') or NA}"]
    for d in devices:
        bw = d.get("memory_bandwidth_bytes_per_s")
        lines.append(f"GPU {d['index']}: {d.get('name') or NA}  ({d.get('uuid') or NA})")
        lines.append(
            f"  memory {_gib(d.get('memory_total_bytes'))} GiB, bus {d.get('memory_bus_width_bits') or NA} bit, "
            f"peak bandwidth {NA if bw is None else f'{bw / 1e12:.2f} TB/s'}"
        )
        lines.append(
            f"  cores {d.get('cores') or NA}, compute capability {d.get('compute_capability') or NA}, "
            f"max clocks SM {d.get('max_sm_clock_mhz') or NA} / memory {d.get('max_memory_clock_mhz') or NA} MHz"
        )
        lines.append(
            f"  power limit {d.get('power_limit_w') or NA} W (default {d.get('power_default_limit_w') or NA} W), "
            f"PCIe gen {d.get('pcie_max_generation') or NA} x{d.get('pcie_max_width') or NA}, MIG {d.get('mig_mode') or NA}"
        )
        if d.get("mig_device_uuids"):
            lines.append(f"  MIG instances (for CUDA_VISIBLE_DEVICES): {', '.join(d['mig_device_uuids'])}")
    return "\n".join(lines)
