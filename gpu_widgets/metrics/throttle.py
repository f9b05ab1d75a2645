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


_KNOWN = 0
for _bit, _, _ in REASONS:
    _KNOWN |= _bit
_BITS: dict[str, int] = {name: bit for bit, name, _ in REASONS}
# A GPU shows a handful of distinct masks over its life; the sampler asks for each GPU every tick.
_NAMES_CACHE: dict[int, tuple[str, ...]] = {}


def names_from_mask(mask: int) -> list[str]:
    """NVML bitmask -> our names, in display order; unknown bits become ``other_0x...``."""
    names = _NAMES_CACHE.get(mask)
    if names is None:
        found = [name for bit, name, _ in REASONS if mask & bit]
        rest = mask & ~_KNOWN
        if rest:
            found.append(f"other_{rest:#x}")
        names = tuple(found)
        if len(_NAMES_CACHE) < 4096:  # bounded even if a driver reported garbage masks
            _NAMES_CACHE[mask] = names
    return list(names)


def mask_from_names(names: list[str]) -> int:
    mask = 0
    for name in names:
        mask |= _BITS.get(name, 0)
    return mask
