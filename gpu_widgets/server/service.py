"""The server's one GPU service: owns the sampler and answers handlers from memory only.

Everything that touches NVML (opening the backend, sampling, refreshing a spec card after a GPU
comes back) runs on the sampler's threads; handlers read ``latest``, the cached device info and
the history, so the event loop never waits on the driver and the NVML call rate does not depend
on how many clients poll.
"""
from __future__ import annotations

import json
import logging
import threading
import time
from typing import Any

from .. import __version__
from ..backends import Backend, ConfigError, NoGpuBackend, open_backend
from ..sampler import Sampler
from .privacy import redact_snapshot

STARTING = "starting"


class GpuService:
    def __init__(
        self,
        backend_choice: str | None = None,
        interval_s: float = 1.0,
        slow_interval_s: float = 2.0,
        window_s: float = 3600.0,
        show_other_users_processes: bool = False,
        max_points_limit: int = 5000,
        log: logging.Logger | None = None,
        backend: Backend | None = None,
    ) -> None:
        self.backend_choice = backend_choice
        self.interval_s = interval_s
        self.slow_interval_s = slow_interval_s
        self.window_s = window_s
        self.show_other_users_processes = show_other_users_processes
        self.max_points_limit = max_points_limit
        self.log = log or logging.getLogger(__name__)
        self._backend = backend
        self.sampler: Sampler | None = None
        self._devices: list[dict[str, Any]] = []
        self._device_status: list[str] = []
        self._ready = threading.Event()
        self._thread: threading.Thread | None = None
        self._stopped = False
        self._latest_json: tuple[dict[str, Any], str | None, str] | None = None
        # The last whole-window answer, keyed by (max_points, samples appended): a hundred tabs
        # opening at once share one downsampling and one serialisation of the hour.
        self._window_json: tuple[tuple[int, int], str] | None = None
        self._window_lock = threading.Lock()

    # -- lifecycle -----------------------------------------------------------------------------
    def start_in_background(self) -> None:
        self._thread = threading.Thread(target=self._start, name="gpu-widgets-open", daemon=True)
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
        self._device_status = [d.get("status", "ok") for d in devices]

    def _on_sample(self, snapshot: dict[str, Any]) -> None:
        # Runs on the sampler thread: a GPU that came back (or got lost) gets its card re-read here.
        status = [d.get("status", "ok") for d in snapshot["devices"]]
        if status != self._device_status:
            self._refresh_devices()

    # -- what handlers read --------------------------------------------------------------------
    @property
    def ready(self) -> bool:
        return self._ready.is_set() and self.sampler is not None

    def status(self) -> dict[str, Any]:
        out: dict[str, Any] = {
            "backend": None,
            "status": STARTING,
            "reason": "the GPU sampler is starting",
            "driver_version": None,
            "cuda_driver_version": None,
            "nvml_version": None,
            "interval_s": self.interval_s,
            "window_s": self.window_s,
            "server_time": time.time(),
            "version": __version__,
            "device_count": 0,
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
            )
        return out

    def devices(self) -> list[dict[str, Any]]:
        return self._devices

    def latest(self) -> dict[str, Any] | None:
        return self.sampler.latest if self.sampler is not None else None

    def latest_json(self, snapshot: dict[str, Any], me: str | None) -> str:
        """The JSON of ``snapshot`` (redacted for ``me`` unless None), made once per sample:
        a hundred tabs polling the same second share one serialisation."""
        cached = self._latest_json
        if cached is not None and cached[0] is snapshot and cached[1] == me:
            return cached[2]
        body = json.dumps(snapshot if me is None else redact_snapshot(snapshot, me), allow_nan=False)
        self._latest_json = (snapshot, me, body)
        return body

    def samples_json(self, since: float | None, max_points: int) -> str:
        """The ``samples`` answer as JSON, all but ``server_time`` (the handler adds the clock at
        the moment it answers). An answer that covers the whole window is made once per tick."""
        sampler = self.sampler
        if sampler is None or not sampler.history.whole_window(since):
            return self._samples_json(since, max_points)
        key = (max_points, sampler.history.appended)
        with self._window_lock:  # tabs asking at the same moment wait for one answer and share it
            cached = self._window_json
            if cached is not None and cached[0] == key:
                return cached[1]
            body = self._samples_json(since, max_points)
            self._window_json = (key, body)
            return body

    def _samples_json(self, since: float | None, max_points: int) -> str:
        data = self.history(since, max_points)
        # Each device also carries why its latest values are null, so a client that only polls
        # the history can still explain a gap.
        latest = self.latest()
        reasons = {d["index"]: d.get("unavailable") or {} for d in (latest["devices"] if latest else ())}
        for dev in data["devices"]:
            dev["unavailable"] = reasons.get(dev["index"], {})
        status = self.status()
        return json.dumps({
            "backend": status["backend"],
            "status": status["status"],
            "interval_s": status["interval_s"],
            "window_s": status["window_s"],
            **data,
        }, allow_nan=False)

    def history(self, since: float | None, max_points: int) -> dict[str, Any]:
        """Downsampling an hour of 8 GPUs is real work: callers run this in a worker thread unless
        they ask for a few seconds only."""
        if self.sampler is None:
            return {"timestamps": [], "devices": []}
        return self.sampler.history.since(since, max_points=max_points)
