"""Clock throttle ("clocks event") reasons: NVML's bit, our stable name, and words for people.

One form inside, names outside. From the NVML call to the moment JSON or text is written, a
GPU's reasons are one ``int``: NVML's ``nvmlClocksEventReason*`` bitmask as the driver returned it
(identical in the older ``ThrottleReasons`` call), or ``None`` when they could not be read. The
backends put it in the sample's ``throttle_reasons``, the history and the run traces store it as
is, and episodes and totals are found by ``mask & SLOWDOWN_MASK``. Names are made only where the
sample leaves Python: the server's answers, ``snapshot --json``, the run files, the CLI and the
widgets' text call :func:`names_from_mask` (or :func:`slowdown_names`). There they are the public
JSON: a list in display order, a bit we do not know as ``other_0x...``.
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
BITS: dict[str, int] = {name: bit for bit, name, _ in REASONS}

# Reasons that cost performance while the GPU is busy (idle and app clocks are not a slowdown).
SLOWDOWNS: frozenset[str] = frozenset(
    {"sw_power_cap", "sw_thermal_slowdown", "hw_thermal_slowdown", "hw_power_brake_slowdown", "hw_slowdown"}
)
SLOWDOWN_MASK: int = sum(BITS[name] for name in SLOWDOWNS)
KNOWN_MASK: int = sum(BITS.values())
OTHER_PREFIX = "other_"

# A GPU shows a handful of distinct masks over its life; names are asked for each GPU every tick.
_NAMES_CACHE: dict[int, tuple[str, ...]] = {}


def _names(mask: int) -> tuple[str, ...]:
    names = _NAMES_CACHE.get(mask)
    if names is None:
        if mask < 0:
            raise ValueError(f"a throttle reason mask is a non-negative int, got {mask}")
        found = [name for bit, name, _ in REASONS if mask & bit]
        rest = mask & ~KNOWN_MASK
        if rest:
            found.append(f"{OTHER_PREFIX}{rest:#x}")
        names = tuple(found)
        if len(_NAMES_CACHE) < 4096:  # bounded even if a driver reported garbage masks
            _NAMES_CACHE[mask] = names
    return names


def names_from_mask(mask: int) -> list[str]:
    """NVML bitmask -> our names, in display order; unknown bits become ``other_0x...``."""
    return list(_names(mask))


def json_names(mask: int | None) -> list[str] | None:
    """The public JSON of a sample's reasons: the names, or None when they were not read."""
    return None if mask is None else list(_names(mask))


def slowdown_names(mask: int | None) -> list[str]:
    """The names of the reasons in ``mask`` that slow a busy GPU down (none for None)."""
    if not mask or not mask & SLOWDOWN_MASK:
        return []
    return list(_names(mask & SLOWDOWN_MASK))


def mask_from_names(names: list[str]) -> int:
    """Names (read back from a run file) -> the bitmask. ``other_0x...`` gives its bits back, so a
    file round-trips; a name this version does not know (a file from a newer one) is left out."""
    mask = 0
    for name in names:
        bit = BITS.get(name)
        mask |= _other_bits(name) if bit is None else bit
    return mask


def _other_bits(name: str) -> int:
    if name.startswith(OTHER_PREFIX):
        try:
            bits = int(name[len(OTHER_PREFIX):], 16)
        except ValueError:
            return 0
        if bits > 0:
            return bits & ~KNOWN_MASK
    return 0
