"""A process's one GPU service (the Jupyter server's, the exporter's): owns the sampler, answers from memory.

Everything that touches NVML (opening the backend, sampling, refreshing a spec card after a GPU
comes back) runs on the sampler's threads; its readers (HTTP handlers, scrapes) read ``latest``,
the cached device info and the history, so an event loop never waits on the driver and the NVML
call rate does not depend on how many clients poll.
"""
from __future__ import annotations

import json
import logging
import threading
import time
from collections.abc import Mapping
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from .._version import __version__
from ..backends import Backend, ConfigError, NoGpuBackend, open_backend
from ..metrics.samples import Snapshot
from ..sampling.sampler import Sampler
from ..sampling.snapshot import aged, empty, public
from ..sampling.stall import STALE, stale_after_s, waiting_on
from ..store.history import History
from . import gc_heap, json_pieces
from .gzipped import SharedBody
from .privacy import redact_snapshot
from .samples import SamplesAnswers
from .shared_answers import PerSample

STARTING = "starting"
# After the backend opened, until its first sample or the stall rule (stall.py): never "ok" without one.
FIRST_SAMPLE = "waiting for the first GPU sample"
# Added to the latest sample when it is served: they say whether it is still current.
FRESHNESS_KEYS = ("status", "reason", "sample_age_s")
# samples/latest of a machine with more GPUs than this is made as each sample arrives while a
# client asked for it in the last WARM_LEASE_S (a poll then finds it ready: ~45 ms less at 64 GPUs).
WARM_LATEST_GPUS = 8
WARM_LEASE_S = 10.0


class GpuService:
    def __init__(
        self,
        backend_choice: str | None = None,
        interval_s: float = 1.0,
        slow_interval_s: float = 2.0,
        window_s: float = 3600.0,
        show_other_users_processes: bool = False,
        max_points_limit: int = 5000,
        max_response_points: int = 32000,
        log: logging.Logger | None = None,
        backend: Backend | None = None,
        freeze_gc_on_big_machines: bool = False,
    ) -> None:
        self.backend_choice = backend_choice
        self.interval_s = interval_s
        self.slow_interval_s = slow_interval_s
        self.window_s = window_s
        self.show_other_users_processes = show_other_users_processes
        self.max_points_limit = max_points_limit
        self.log = log or logging.getLogger(__name__)
        self._backend = backend
        self.freeze_gc_on_big_machines = freeze_gc_on_big_machines
        self.sampler: Sampler | None = None
        self._devices: list[dict[str, Any]] = []
        self._device_status: list[tuple[Any, ...]] = []
        self._ready = threading.Event()
        self._thread: threading.Thread | None = None
        self._opening_since: float | None = None
        self._stopped = False
        self._latest_json: tuple[Snapshot, int | None, SharedBody] | None = None
        self._latest_lock = threading.Lock()  # one thread makes a sample's JSON; the others wait for it
        # Who asked for samples/latest last, and when: while someone polls, a big machine's answer
        # is made as each sample arrives (_on_sample), before the first poll after it asks.
        self._latest_asked: tuple[float, int | None] = (float("-inf"), None)
        self._warm_pool = ThreadPoolExecutor(1, thread_name_prefix="gpu-widgets-latest")
        self.samples = SamplesAnswers(self._history, self.latest, self.status, max_response_points)
        # samples/latest and processes pages of a big machine, shared by the requests of one sample.
        self.latest_shared, self.pages_shared = PerSample(), PerSample()

    # -- lifecycle -----------------------------------------------------------------------------
    def start_in_background(self) -> None:
        self._thread = threading.Thread(target=self._start, name="gpu-widgets-open", daemon=True)
        self._opening_since = time.monotonic()  # a driver call that hangs while opening shows as stale
        self._thread.start()

    def _start(self) -> None:
        try:
            backend = self._backend or open_backend(self.backend_choice)
        except ConfigError as exc:
            self.log.error("gpu-widgets: %s", exc)
            backend = NoGpuBackend(f"bad configuration: {exc}")
        except Exception as exc:  # a bug must not take the server down
            self.log.exception("gpu-widgets: could not open a GPU backend")
            backend = NoGpuBackend(f"could not open a GPU backend: {exc}")
        sampler = Sampler(backend, interval_s=self.interval_s, window_s=self.window_s,
                          slow_interval_s=self.slow_interval_s)
        sampler.subscribe(self._on_sample)
        self.sampler = sampler
        self._refresh_devices()
        if not self._stopped:
            sampler.start()
        if backend.status == "ok":
            self.log.info("gpu-widgets: sampling %d GPU(s) with the %s backend every %s s",
                          len(self._devices), backend.name, self.interval_s)
        else:
            self.log.warning("gpu-widgets: no GPU to sample: %s", backend.reason)
        self._ready.set()

    def stop(self) -> None:
        self._stopped = True
        if self.sampler is not None:
            self.sampler.stop()
        self.samples.stop()
        self._warm_pool.shutdown(wait=False, cancel_futures=True)

    def wait_ready(self, timeout: float | None = None) -> bool:
        return self._ready.wait(timeout)

    # -- device info (the spec cards) ----------------------------------------------------------
    def _refresh_devices(self) -> None:
        assert self.sampler is not None
        try:
            devices = self.sampler.backend.device_info()
        except Exception:
            self.log.exception("gpu-widgets: reading device info failed")
            return
        self._devices = devices
        self._device_status = [_card_key(d) for d in devices]

    def _on_sample(self, snapshot: Snapshot) -> None:
        # Runs on the sampler thread: a GPU that came back (or got lost), or whose name or UUID
        # NVML now tells, gets its card re-read here.
        status = [_card_key(d) for d in snapshot["devices"]]
        if status != self._device_status:
            self._refresh_devices()
        if self.freeze_gc_on_big_machines:
            gc_heap.freeze_once_big(snapshot, self.log)
        asked_at, me = self._latest_asked
        if len(snapshot["devices"]) > WARM_LATEST_GPUS and time.monotonic() - asked_at < WARM_LEASE_S:
            # Off the sampler thread: it must not wait the ~40 ms 64 GPUs' JSON and gzip take.
            self._warm_pool.submit(self.latest_json, snapshot, me, True)

    # -- what its readers use ------------------------------------------------------------------
    @property
    def ready(self) -> bool:
        return self._ready.is_set() and self.sampler is not None

    def status(self) -> dict[str, Any]:
        out: dict[str, Any] = {
            "backend": None,
            "status": STARTING,
            "reason": "the GPU sampler is starting",
            "sample_age_s": None,
            "driver_version": None,
            "cuda_driver_version": None,
            "nvml_version": None,
            "interval_s": self.interval_s,
            "window_s": self.window_s,
            "server_time": time.time(),
            "version": __version__,
            "device_count": 0,
            "processes_note": None,
        }
        if self.ready:
            assert self.sampler is not None
            backend = self.sampler.backend
            out.update(
                backend=backend.name,
                status=backend.status,
                reason=backend.reason,
                driver_version=backend.system.get("driver_version"),
                cuda_driver_version=backend.system.get("cuda_driver_version"),
                nvml_version=backend.system.get("nvml_version"),
                interval_s=self.sampler.interval_s,
                device_count=len(self._devices),
                processes_note=backend.process_note(),
            )
            age, stale = self.sampler.staleness()
            out["sample_age_s"] = None if age is None else round(age, 3)
            if stale is not None and backend.status == "ok":
                out.update(status=STALE, reason=stale)
            elif backend.status == "ok" and self.sampler.latest is None:
                out.update(status=STARTING, reason=FIRST_SAMPLE)
        elif self._opening_since is not None and time.monotonic() - self._opening_since > stale_after_s(self.interval_s, True):
            why = waiting_on(self._thread) or "the GPU backend has not opened"
            out.update(status=STALE, reason=f"{why} (opening the GPU backend)")
        return out

    def devices(self) -> list[dict[str, Any]]:
        return self._devices

    def latest(self) -> Snapshot | None:
        return self.sampler.latest if self.sampler is not None else None

    def _history(self) -> History | None:
        return self.sampler.history if self.sampler is not None else None

    def pending_answer(self) -> dict[str, Any]:
        """The ``samples/latest`` answer before the first sample: no devices, the status of now."""
        status = self.status()
        snap: dict[str, Any] = dict(empty(status["status"], status["reason"], status["backend"], status["server_time"]))
        snap.update((k, status[k]) for k in ("driver_version", "cuda_driver_version", "nvml_version"))
        return aged(snap, status["status"], status["reason"], status["sample_age_s"])

    def latest_answer(self, snapshot: Snapshot, me: int | None) -> tuple[SharedBody, bytes]:
        """The ``samples/latest`` answer: the snapshot's shared JSON (without its closing brace)
        and its end, ``status``, ``reason`` and ``sample_age_s`` of the moment of answering (the
        sampler may be stuck). They come last so that the shared part can be gzipped once."""
        status = self.status()
        tail = json.dumps({key: status[key] for key in FRESHNESS_KEYS})
        return self.latest_json(snapshot, me), b"," + tail[1:].encode()

    def latest_asked(self, me: int | None) -> None:
        """A client asked for samples/latest as uid ``me``: the next samples' answers are made
        as they arrive, for ``WARM_LEASE_S``."""
        self._latest_asked = (time.monotonic(), me)

    def latest_json_made(self, snapshot: Snapshot, me: int | None) -> bool:
        """Whether ``latest_json`` has this one ready (else it is made in a worker: 64 GPUs'
        JSON is a megabyte, ~20 ms the event loop would be held)."""
        cached = self._latest_json
        return cached is not None and cached[0] is snapshot and cached[1] == me

    def latest_json(self, snapshot: Snapshot, me: int | None, deflate: bool = False) -> SharedBody:
        """The JSON of ``snapshot`` (redacted for uid ``me`` unless None) but its status and
        reason and closing brace, UTF-8, made once per sample: a hundred tabs polling the same
        second share it (and its gzip, made here too when ``deflate``: in the worker)."""
        cached = self._latest_json
        if cached is not None and cached[0] is snapshot and cached[1] == me:
            return cached[2]
        with self._latest_lock:
            return self._make_latest_json(snapshot, me, deflate)

    def _make_latest_json(self, snapshot: Snapshot, me: int | None, deflate: bool) -> SharedBody:
        cached = self._latest_json  # made meanwhile by the thread that held the lock?
        if cached is not None and cached[0] is snapshot and cached[1] == me:
            if deflate and cached[2].worth_compressing():
                cached[2].deflate()
            return cached[2]
        data = public(snapshot)
        if me is not None:
            data = redact_snapshot(data, me)
        # A GPU at a time (json_pieces.py): one dumps of 64 GPUs' megabyte held the GIL ~20 ms.
        text = json_pieces.object_with_list({k: v for k, v in data.items() if k not in FRESHNESS_KEYS},
                                            "devices", data["devices"])
        body = SharedBody(text[:-1].encode())
        if deflate and body.worth_compressing():
            body.deflate()
        self._latest_json = (snapshot, me, body)
        return body


def _card_key(device: Mapping[str, Any]) -> tuple[Any, ...]:
    """What, when it changes in a sample, makes a GPU's spec card worth reading again."""
    return device.get("status", "ok"), device.get("uuid"), device.get("name")
