"""What every backend provides: static device info and two kinds of reads (fast and slow).

A backend never raises from its read methods: a field it cannot read is ``None`` with the
reason in the device's ``unavailable`` map, and a device that stopped answering has
``status: "lost"``. The sampler decides when each read happens.
"""
from __future__ import annotations

from abc import ABC, abstractmethod
from typing import Any, cast

from ..metrics.fields import FAST_FIELDS, SLOW_FIELDS
from ..metrics.samples import DeviceSample, FastRead, SlowRead

DeviceDict = dict[str, Any]  # static device info (the spec card): its fields vary by backend

OK = "ok"
NO_GPU = "no_gpu"
LOST = "lost"

# Why the GPM fields and per-process use are null while no view asks for them (Sampler.want_gpm).
GPM_OFF = "not read: nobody is looking (read only while a view, the API or a snapshot asks for it)"
USAGE_OFF = GPM_OFF
GPM_PENDING = "not read yet (GPM compares two samples; the first figure comes in about a second)"


class Backend(ABC):
    #: "nvml", "simulated" or "none" (no usable GPU backend)
    name: str = "none"

    def __init__(self) -> None:
        self.status: str = OK
        self.reason: str | None = None
        self.system: dict[str, Any] = {"driver_version": None, "nvml_version": None, "cuda_driver_version": None}
        # Set by the sampler before each slow read: read GPM metrics and per-process use only while
        # someone looks. Off, they are null with GPM_OFF and cost no driver call.
        self.gpm = False

    @abstractmethod
    def open(self) -> None:
        """Find the devices; idempotent. Sets ``status``/``reason`` instead of raising."""

    @abstractmethod
    def device_info(self) -> list[DeviceDict]:
        """Static facts per device (the spec card)."""

    @abstractmethod
    def read_fast(self, t: float) -> list[FastRead]:
        """One dict per device: identity, status, the FAST fields and ``unavailable``; a fresh dict
        each call (the snapshot takes it over)."""

    @abstractmethod
    def read_slow(self, t: float) -> list[SlowRead]:
        """One dict per device: ``index``, the SLOW fields and ``unavailable``."""

    def process_note(self) -> str | None:
        """One line on how its processes' pids were found, where they are not the host's (a
        container); None where its pids are the processes' own."""
        return None

    def prime_gpm(self) -> bool:
        """Take the first of the two GPM samples now; True when the caller must wait before the
        second (a backend whose figures need no second sample says False)."""
        return False

    def close(self) -> None:
        """Release what open() took."""


def null_fields(names: tuple[str, ...], reason: str) -> tuple[dict[str, None], dict[str, str]]:
    """Every named field null, each with the same reason."""
    return dict.fromkeys(names), dict.fromkeys(names, reason)


def lost_device(index: int, uuid: str | None, name: str | None, reason: str) -> DeviceSample:
    """A GPU that stopped answering: every field null with ``reason`` (slow ones too: the snapshot
    keeps no slow part for a lost GPU)."""
    values, unavailable = null_fields(FAST_FIELDS + SLOW_FIELDS, reason)
    return cast(DeviceSample, {"index": index, "uuid": uuid, "name": name, "status": LOST, **values,
                               "unavailable": unavailable})


class NoGpuBackend(Backend):
    """The state when no GPU backend can run: no devices, and the reason why."""

    name = "none"

    def __init__(self, reason: str) -> None:
        super().__init__()
        self.status = NO_GPU
        self.reason = reason

    def open(self) -> None:
        pass

    def device_info(self) -> list[DeviceDict]:
        return []

    def read_fast(self, t: float) -> list[FastRead]:
        return []

    def read_slow(self, t: float) -> list[SlowRead]:
        return []
