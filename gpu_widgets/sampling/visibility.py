"""Which GPUs a CUDA process sees, from ``CUDA_VISIBLE_DEVICES``.

CUDA accepts indices (``0,2``), UUIDs (``GPU-8f6e...``, any unique prefix) and MIG instances
(``MIG-<uuid>``, or ``MIG-GPU-<gpu uuid>/<gpu instance>/<compute instance>`` from CUDA 11's
first releases), and it stops at the first entry it cannot resolve. We follow the same rules to
map CUDA's device ordinals to NVML indices; a MIG instance maps to the GPU it is part of. A CUDA
process uses at most one MIG instance (NVIDIA's MIG guide), so the list ends after one.

NVML numbers GPUs in PCI bus order; CUDA does too when ``CUDA_DEVICE_ORDER=PCI_BUS_ID`` and, by
default, when all GPUs are the same model.
"""
from __future__ import annotations

from collections.abc import Sequence

# What CUDA accepts, for messages about a value that names no GPU.
ACCEPTED = ("comma-separated GPU indices (0,2), GPU UUIDs or unique prefixes of them (GPU-8f6e...), "
            "or one MIG instance (MIG-...)")
# No machine has this many GPUs; a longer "index" names none (and int() of 4300+ digits raises).
_MAX_INDEX_DIGITS = 6
_SHOWN_CHARS = 40


def shown_setting(value: str) -> str:
    """``value`` quoted for a message, cut to its first characters when long (a 5000-digit setting)."""
    if len(value) <= _SHOWN_CHARS:
        return repr(value)
    return f"{value[:_SHOWN_CHARS]!r}... ({len(value)} characters)"


def cuda_visible_indices(
    value: str | None,
    uuids: Sequence[str | None],
    mig_uuids: Sequence[Sequence[str] | None] | None = None,
) -> list[int] | None:
    """NVML indices in CUDA ordinal order; None when the variable is unset (all GPUs visible).

    ``uuids[i]`` is the UUID of the GPU with NVML index i; ``mig_uuids[i]`` the UUIDs of its MIG
    instances (empty or None without MIG).
    """
    if value is None:
        return None
    visible: list[int] = []
    for raw in value.split(","):
        token = raw.strip()
        if not token:
            break
        if token.upper().startswith("MIG-"):
            index = _resolve_mig(token, uuids, mig_uuids or ())
            if index is not None:
                visible.append(index)
            break  # one MIG instance per process: CUDA looks no further
        index = _resolve(token, uuids)
        if index is None or index in visible:
            break  # CUDA ignores this entry and every one after it
        visible.append(index)
    return visible


def _unique_prefix(want: str, names: Sequence[tuple[int, str | None]]) -> int | None:
    want = want.lower()
    matches = [i for i, name in names if name and name.lower().startswith(want)]
    return matches[0] if len(matches) == 1 else None  # an ambiguous prefix names nothing


def _resolve(token: str, uuids: Sequence[str | None]) -> int | None:
    if token.isascii() and token.lstrip("-").isdigit():  # isdigit alone takes "²", which int() refuses
        if token.startswith("-") or len(token.lstrip("0")) > _MAX_INDEX_DIGITS:
            return None  # CUDA finds no such device
        i = int(token.lstrip("0") or "0")  # int() counts leading zeros against its 4300-digit limit
        return i if i < len(uuids) else None
    if token.upper().startswith("GPU-"):
        return _unique_prefix(token, list(enumerate(uuids)))
    return None


def _resolve_mig(token: str, uuids: Sequence[str | None], mig_uuids: Sequence[Sequence[str] | None]) -> int | None:
    if token[4:].upper().startswith("GPU-"):  # MIG-GPU-<gpu uuid>/<gi>/<ci>
        gpu, _, rest = token[4:].partition("/")
        return _resolve(gpu, uuids) if rest else None
    return _unique_prefix(token, [(i, u) for i, instances in enumerate(mig_uuids) for u in instances or ()])
