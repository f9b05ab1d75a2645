"""What an NVML error means for us: a kind that decides what we do next, and plain words.

NVML return codes (nvml.h) are stable across driver releases, so they are matched by number;
that also keeps this module free of pynvml, which only ``library.py`` imports.
"""
from __future__ import annotations

from dataclasses import dataclass

# Kinds of failure, each with its own handling in the backend.
UNSUPPORTED = "unsupported"  # permanent for this device: remember it, never ask again
LOST = "lost"  # the device is gone: mark it lost, probe it again later
NO_GPU = "no_gpu"  # the library cannot be used at all
TRANSIENT = "transient"  # ask again next tick

NOT_SUPPORTED = 3
NO_PERMISSION = 4
NOT_FOUND = 6
DRIVER_NOT_LOADED = 9
TIMEOUT = 10
LIBRARY_NOT_FOUND = 12
FUNCTION_NOT_FOUND = 13
GPU_IS_LOST = 15
RESET_REQUIRED = 16
LIB_RM_VERSION_MISMATCH = 18
NO_DATA = 21
ARGUMENT_VERSION_MISMATCH = 25
GPU_NOT_FOUND = 28
UNKNOWN = 999

_KINDS = {
    NOT_SUPPORTED: UNSUPPORTED,
    FUNCTION_NOT_FOUND: UNSUPPORTED,
    ARGUMENT_VERSION_MISMATCH: UNSUPPORTED,
    NO_PERMISSION: UNSUPPORTED,
    GPU_IS_LOST: LOST,
    GPU_NOT_FOUND: LOST,
    RESET_REQUIRED: LOST,
    DRIVER_NOT_LOADED: NO_GPU,
    LIBRARY_NOT_FOUND: NO_GPU,
    LIB_RM_VERSION_MISMATCH: NO_GPU,
}

# Short reasons shown to users in the `unavailable` map and in the no-GPU state.
_REASONS = {
    NOT_SUPPORTED: "not supported on this GPU",
    FUNCTION_NOT_FOUND: "not supported by this driver (function not found; a newer driver may add it)",
    ARGUMENT_VERSION_MISMATCH: "not supported by this driver (structure version mismatch)",
    NO_PERMISSION: "no permission to read it",
    GPU_IS_LOST: "GPU is lost (it stopped answering; check `dmesg` for Xid errors)",
    GPU_NOT_FOUND: "GPU not found (it may have fallen off the bus)",
    RESET_REQUIRED: "GPU requires a reset",
    DRIVER_NOT_LOADED: "the NVIDIA driver is not loaded",
    LIBRARY_NOT_FOUND: "the NVML library (libnvidia-ml.so.1) was not found: no NVIDIA driver is installed",
    LIB_RM_VERSION_MISMATCH: "the NVML library and the kernel driver versions differ: reboot or reload the driver",
    TIMEOUT: "NVML timed out",
    NO_DATA: "no data yet",
    UNKNOWN: "NVML reported an unknown error",
}


@dataclass(frozen=True)
class Failure:
    """One failed NVML call, as data."""

    code: int | None
    kind: str
    reason: str


def classify(exc: BaseException) -> Failure:
    """Turn an exception raised by a pynvml call into a Failure.

    Anything that is not an NVMLError (a ctypes error, a bug in the bindings) is transient:
    the caller gets a null and a reason instead of a crash.
    """
    code = getattr(exc, "value", None)
    if not isinstance(code, int):
        return Failure(None, TRANSIENT, f"unexpected error: {type(exc).__name__}: {exc}")
    kind = _KINDS.get(code, TRANSIENT)
    reason = _REASONS.get(code)
    if reason is None:
        try:
            detail = str(exc)
        except Exception:  # NVMLError.__str__ calls back into the library
            detail = ""
        reason = f"NVML error {code}" + (f": {detail}" if detail else "")
    return Failure(code, kind, reason)
