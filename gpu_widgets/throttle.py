"""Clock throttle ("clocks event") reasons: NVML's bit, our stable name, and words for people.

The names are part of the public JSON (``throttle_reasons``); the bits are NVML's
``nvmlClocksEventReason*`` constants, identical in the older ``ThrottleReasons`` call.
"""
from __future__ import annotations

# (bit, name, label); order is the order shown to users.
REASONS: tuple[tuple[int, str, str], ...] = (
    (0x0000000000000004, "sw_power_cap", "power cap"),
    (0x0000000000000020, "sw_thermal_slowdown", "thermal (software)"),
    (0x0000000000000040, "hw_thermal_slowdown", "thermal (hardware)"),
    (0x0000000000000080, "hw_power_brake_slowdown", "power brake (hardware)"),
    (0x0000000000000008, "hw_slowdown", "hardware slowdown"),
    (0x0000000000000010, "sync_boost", "sync boost"),
    (0x0000000000000002, "applications_clocks_setting", "application clocks setting"),
    (0x0000000000000100, "display_clock_setting", "display clock setting"),
    (0x0000000000000001, "gpu_idle", "idle"),
)

NAMES: tuple[str, ...] = tuple(name for _, name, _ in REASONS)
LABELS: dict[str, str] = {name: label for _, name, label in REASONS}

# Reasons that cost performance while the GPU is busy (idle and app clocks are not a slowdown).
SLOWDOWNS: frozenset[str] = frozenset(
    {"sw_power_cap", "sw_thermal_slowdown", "hw_thermal_slowdown", "hw_power_brake_slowdown", "hw_slowdown"}
)


def names_from_mask(mask: int) -> list[str]:
    """NVML bitmask -> our names, in display order; unknown bits become ``other_0x...``."""
    names = [name for bit, name, _ in REASONS if mask & bit]
    known = 0
    for bit, _, _ in REASONS:
        known |= bit
    rest = mask & ~known
    if rest:
        names.append(f"other_{rest:#x}")
    return names


def mask_from_names(names: list[str]) -> int:
    bits = {name: bit for bit, name, _ in REASONS}
    mask = 0
    for name in names:
        mask |= bits.get(name, 0)
    return mask
