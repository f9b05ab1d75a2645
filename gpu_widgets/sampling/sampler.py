"""One background sampler per process: fast fields on a drift-free tick, slow fields on their own
thread, a bounded history, and subscribers that can never break it.

Cadence of each field (see fields.py): utilization, memory, temperature, fan, power, energy,
clocks, P-state and throttle reasons are read at every tick (default 1 s, floor 0.1 s). PCIe
throughput (the driver blocks ~20 ms per call) and the process list are read on a separate
thread every ``slow_interval_s`` (default 2 s, at most 5 s), and each tick carries the latest
of those, so slow calls never delay the fast ones.

GPM metrics and per-process use (fields.GPM_FIELDS, ``processes[].sm_percent``) are read on the
slow thread only while someone asks: ``want_gpm(owner)`` holds a lease (30 s unless renewed, or
until ``release_gpm``); with no lease they are null and cost nothing. A GPM figure compares two
samples: the first lease wakes the slow thread, which takes the first sample at once and the
second GPM_FIRST_GAP_S later, so a view has its first figure within about a second, not after two
slow intervals; until then the fields say GPM_PENDING ("not read yet"), never "nobody is looking".

``latest`` and subscribers get a ``Snapshot`` (metrics/samples.py), shared by all of them: read
it, do not change it. Its throttle reasons are NVML's bitmask; ``snapshot.public`` gives the JSON.
"""
from __future__ import annotations

import logging
import math
import threading
import warnings
from typing import Any, Callable

from ..backends import Backend, ConfigError, inflight, open_backend
from ..backends.base import GPM_OFF, GPM_PENDING
from ..metrics.fields import GPM_FIELDS
from ..metrics.samples import Snapshot, SlowRead
from ..store.history import History
from .clock import Clock, next_deadline
from .snapshot import PENDING, by_memory, compose
from .stall import stale_after_s, waiting_on

log = logging.getLogger(__name__)

MIN_INTERVAL_S = 0.1
DEFAULT_INTERVAL_S = 1.0
DEFAULT_SLOW_INTERVAL_S = 2.0
MAX_SLOW_INTERVAL_S = 5.0
DEFAULT_WINDOW_S = 3600.0
GPM_LEASE_S = 30.0
# The gap between the first two GPM samples of a new lease (NVML wants at least 0.1 s): short, so
# the first figure comes soon; later figures span one slow interval.
GPM_FIRST_GAP_S = 0.25

Subscriber = Callable[[Snapshot], None]


def checked_interval(value: Any, name: str = "interval_s") -> float:
    """Validate a sampling interval: a clear error for nonsense, the floor for too-fast values."""
    try:
        interval = float(value)
    except (TypeError, ValueError):
        raise ValueError(f"{name} must be a number of seconds, got {value!r}") from None
    if not math.isfinite(interval) or interval <= 0:
        raise ValueError(f"{name} must be a positive number of seconds, got {value!r}")
    if interval < MIN_INTERVAL_S:
        warnings.warn(f"{name}={interval} is below the floor; sampling every {MIN_INTERVAL_S} s", stacklevel=3)
        interval = MIN_INTERVAL_S
    return interval


class Sampler:
    """Samples a backend in the background. Start/stop are idempotent; nothing raises to callers."""

    def __init__(
        self,
        backend: Backend,
        interval_s: float = DEFAULT_INTERVAL_S,
        window_s: float = DEFAULT_WINDOW_S,
        slow_interval_s: float = DEFAULT_SLOW_INTERVAL_S,
        clock: Clock | None = None,
    ) -> None:
        self.backend = backend
        self._interval = checked_interval(interval_s)
        slow = checked_interval(slow_interval_s, "slow_interval_s")
        if slow > MAX_SLOW_INTERVAL_S:
            raise ValueError(f"slow_interval_s must be at most {MAX_SLOW_INTERVAL_S} s (process list freshness), got {slow}")
        self._slow_interval = slow
        self.clock = clock or Clock()
        self.history = History(window_s=window_s, interval_s=self._interval)
        self._subscribers: list[Subscriber] = []
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._threads: list[threading.Thread] = []
        self._latest: Snapshot | None = None
        self._slow: dict[int, SlowRead] = {}
        self._slow_ready = threading.Event()
        # MIG UUIDs: None until start() reads them. GPU UUIDs come from each read instead, so a GPU
        # that could not tell its UUID at start (lost, a timeout) maps CUDA_VISIBLE_DEVICES once it does.
        self._mig_uuids: list[list[str] | None] | None = None
        # Monotonic times for staleness (stall.py): the newest sample, the newest slow read, and
        # when start() began; with the threads, so a reader can name the call one is stuck in.
        self._latest_mono: float | None = None
        self._slow_mono: float | None = None
        self._slow_wall: tuple[float, float] | None = None  # wall times the newest slow read began and ended
        self._started_mono: float | None = None
        self._opener: threading.Thread | None = None
        self._fast_thread: threading.Thread | None = None
        self._slow_thread: threading.Thread | None = None
        self._gpm_leases: dict[str, float | None] = {}  # owner -> monotonic expiry, None: until released
        self._slow_wake = threading.Event()  # set by stop() and by the first GPM lease: read now
        self._slow_gpm = False  # whether the newest slow read had GPM on
        self.ticks = 0
        self.skipped_ticks = 0
        self.subscriber_errors = 0

    # -- configuration -------------------------------------------------------------------------
    @property
    def interval_s(self) -> float:
        return self._interval

    @interval_s.setter
    def interval_s(self, value: float) -> None:
        # Takes effect at the next tick; the history keeps its capacity (its window shrinks or
        # grows with the interval, its memory does not).
        self._interval = checked_interval(value)

    @property
    def slow_interval_s(self) -> float:
        return self._slow_interval

    @property
    def slow_read_span(self) -> tuple[float, float] | None:
        """Wall times (epoch s) at which the newest slow read (processes, clocks) began and ended:
        a sample taken at or after the end carries it. None before the first."""
        return self._slow_wall

    def read_slow_soon(self) -> None:
        """Take the next slow read now, not at its usual time: a caller that just changed what
        processes hold (freed memory) wants a process list read after the change."""
        self._slow_wake.set()

    # -- GPM demand ---------------------------------------------------------------------------
    def want_gpm(self, owner: str, lease_s: float | None = GPM_LEASE_S) -> None:
        """Read GPM metrics and per-process use for ``owner`` (a name: "sidebar", "monitor:3", ...)
        during the next ``lease_s`` seconds; call again to renew. None: until ``release_gpm(owner)``."""
        if lease_s is not None and not (isinstance(lease_s, (int, float)) and math.isfinite(lease_s) and lease_s > 0):
            raise ValueError(f"lease_s must be a positive number of seconds or None, got {lease_s!r}")
        expiry = None if lease_s is None else self.clock.monotonic() + lease_s
        with self._lock:
            first = not self.gpm_wanted
            self._gpm_leases = {**self._gpm_leases, owner: expiry}
        if first:
            self._slow_wake.set()  # the first sample now, not at the next slow read

    def release_gpm(self, owner: str) -> None:
        """``owner`` no longer looks; unknown owners are ignored."""
        with self._lock:
            self._gpm_leases = {k: v for k, v in self._gpm_leases.items() if k != owner}

    @property
    def gpm_wanted(self) -> bool:
        """Whether anyone's lease is running now."""
        now = self.clock.monotonic()
        return any(expiry is None or expiry > now for expiry in self._gpm_leases.values())

    # -- lifecycle -----------------------------------------------------------------------------
    @property
    def running(self) -> bool:
        return any(t.is_alive() for t in self._threads)

    def start(self) -> "Sampler":
        with self._lock:
            if self.running:
                return self
            self._stop.clear()
            self._started_mono, self._opener = self.clock.monotonic(), threading.current_thread()
            doing = inflight.here()  # what the opener is in, for staleness() meanwhile
            try:
                doing.enter(self.backend.open)
                self.backend.open()
                doing.enter(self.backend.device_info)
                info = self.backend.device_info()
                self._mig_uuids = [d.get("mig_device_uuids") for d in info]
            except Exception:  # a backend bug must not reach the caller
                log.exception("gpu-widgets: opening the %s backend failed", self.backend.name)
            finally:
                doing.enter(None)
            self._threads = [
                threading.Thread(target=self._guard, args=(self._slow_loop,), name="gpu-widgets-slow", daemon=True),
                threading.Thread(target=self._guard, args=(self._fast_loop,), name="gpu-widgets-sampler", daemon=True),
            ]
            self._slow_thread, self._fast_thread = self._threads
            for t in self._threads:
                t.start()
        return self

    def stop(self, timeout: float = 5.0) -> None:
        with self._lock:
            self._stop.set()
            self._slow_wake.set()
            threads, self._threads = self._threads, []
        for t in threads:
            if t is not threading.current_thread():
                t.join(timeout)

    def __enter__(self) -> "Sampler":
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    # -- subscribers ---------------------------------------------------------------------------
    def subscribe(self, callback: Subscriber) -> Callable[[], None]:
        """Call ``callback(snapshot)`` after each tick, on the sampler thread. Returns an unsubscribe."""
        with self._lock:
            self._subscribers = [*self._subscribers, callback]

        def unsubscribe() -> None:
            with self._lock:
                self._subscribers = [s for s in self._subscribers if s is not callback]

        return unsubscribe

    @property
    def latest(self) -> Snapshot | None:
        return self._latest

    def staleness(self) -> tuple[float | None, str | None]:
        """(age of the newest sample in seconds or None before the first, why it is stale or None).

        Computed now, by the caller: the sampler's own threads may be stuck inside a driver call.
        Stale means older than 3 intervals and 2 s (before the first sample: 5 s after start);
        the reason names the call the sampler waits on. A stopped sampler is never stale.
        """
        now = self.clock.monotonic()
        latest = self._latest_mono
        age = None if latest is None else max(0.0, now - latest)
        since = latest if latest is not None else self._started_mono
        if since is None or self._stop.is_set() or now - since <= stale_after_s(self._interval, latest is None):
            return age, None
        why = waiting_on(self._fast_thread or self._opener)
        return age, why or "the sampler has not taken a sample (see the log)"

    # -- the loops -----------------------------------------------------------------------------
    def _guard(self, loop: Callable[[], None]) -> None:
        try:
            loop()
        except Exception:  # never seen in practice; keep the process alive and say why
            log.exception("gpu-widgets: sampler thread stopped by an unexpected error")

    def _fast_loop(self) -> None:
        # Give the slow thread a moment so the first snapshot already has processes.
        self.clock.wait(self._slow_ready, min(self._interval, 0.5))
        start = self.clock.monotonic()
        interval = self._interval
        k_done = 0
        while not self._stop.is_set():
            self.tick()
            if self._interval != interval:  # re-anchor the grid on an interval change
                start, interval, k_done = self.clock.monotonic(), self._interval, 0
                deadline, k = start + interval, 1
            else:
                deadline, k = next_deadline(start, interval, self.clock.monotonic())
            self.skipped_ticks += max(0, k - k_done - 1)
            k_done = k
            delay = deadline - self.clock.monotonic()
            if delay > 0 and self.clock.wait(self._stop, delay):
                return

    def _slow_loop(self) -> None:
        start = self.clock.monotonic()
        while not self._stop.is_set():
            self._slow_wake.clear()  # before the read: a lease asked during it wakes the next wait
            first_gpm = self._read_slow()
            self._slow_ready.set()
            if first_gpm:
                # The first GPM sample of a lease: the second after a short gap (not woken early, so
                # the two are far enough apart), then the usual cadence from there.
                if self.clock.wait(self._stop, min(GPM_FIRST_GAP_S, self._slow_interval)):
                    return
                start = self.clock.monotonic()
                continue
            deadline, _ = next_deadline(start, self._slow_interval, self.clock.monotonic())
            if self.clock.wait(self._slow_wake, max(0.0, deadline - self.clock.monotonic())):
                if self._stop.is_set():
                    return
                start = self.clock.monotonic()  # woken by a new lease: read now, re-anchor the grid

    def _read_slow(self) -> bool:
        """One slow read; True when it took the first GPM sample of a lease (a second must follow)."""
        wanted = self.gpm_wanted
        doing, read = inflight.here(), self.backend.read_slow
        doing.enter(read)  # names the read if it hangs (stall.py)
        began = self.clock.wall()
        try:
            self.backend.gpm = wanted
            parts = by_memory(read(began))  # largest first, once per read
        except Exception:
            log.exception("gpu-widgets: slow read failed")
            return False
        finally:
            doing.enter(None)
        first = wanted and not self._slow_gpm
        self._slow, self._slow_gpm = {p["index"]: p for p in parts}, wanted
        self._slow_mono, self._slow_wall = self.clock.monotonic(), (began, self.clock.wall())
        return first

    def tick(self) -> Snapshot | None:
        """Take one sample now (the loop calls this; tests and one-shot users may too)."""
        t, m = self.clock.wall(), self.clock.monotonic()
        slow, pending = self._fresh_slow(m)
        if not self._slow_gpm and slow and self.gpm_wanted:
            slow = _gpm_pending(slow)  # asked since the last slow read: being read, not "nobody looks"
        # What this thread is in, step by step, so that staleness() can name a read or a subscriber
        # that hangs (the backend names its own calls inside the read).
        doing, read = inflight.here(), self.backend.read_fast
        doing.enter(read)
        try:
            fast = read(t)
            doing.enter(None)
            snapshot = compose(self.backend, t, fast, slow, None, self._mig_uuids, pending)
        except Exception:
            doing.enter(None)
            log.exception("gpu-widgets: reading the %s backend failed", self.backend.name)
            return None
        self.history.append(snapshot)
        self._latest, self._latest_mono = snapshot, m
        self.ticks += 1
        for callback in self._subscribers:
            doing.enter(callback)
            try:
                callback(snapshot)
            except Exception:
                self.subscriber_errors += 1
                if self.subscriber_errors <= 3:  # say it, but do not flood the log every second
                    log.exception("gpu-widgets: a sampler subscriber raised; it stays subscribed")
        doing.enter(None)
        return snapshot

    def _fresh_slow(self, now: float) -> tuple[dict[int, SlowRead], str]:
        """The slow parts for this tick, and the reason for slow fields that have none. A slow
        read stuck for 3 slow intervals makes them null with the call it waits on, rather
        than an old process list or "not read yet" for ever."""
        done = self._slow_mono
        since = done if done is not None else self._started_mono
        if since is None or self._stop.is_set() or now - since <= stale_after_s(self._slow_interval, done is None):
            return self._slow, PENDING
        why = waiting_on(self._slow_thread) or "the slow read failed (see the log)"
        head = "not read yet" if done is None else f"not read for {now - done:.0f} s"
        return {}, f"{head}: {why}"


def _gpm_pending(slow: dict[int, SlowRead]) -> dict[int, SlowRead]:
    """Copies of the slow parts whose GPM fields say GPM_PENDING instead of GPM_OFF (the parts are
    shared with earlier snapshots: never changed in place)."""
    out: dict[int, SlowRead] = {}
    for index, part in slow.items():
        gaps = dict(part.get("unavailable") or {})
        for field in GPM_FIELDS:
            if gaps.get(field) == GPM_OFF:
                gaps[field] = GPM_PENDING
        out[index] = {**part, "unavailable": gaps}  # type: ignore[typeddict-item]
    return out


_shared: Sampler | None = None
_shared_lock = threading.Lock()


def get_sampler(start: bool = True, **settings: Any) -> Sampler:
    """The process-wide sampler, created on first use from the environment's backend choice.

    ``settings`` (interval_s, window_s, slow_interval_s) apply only when it is created;
    change ``interval_s`` on the returned sampler afterwards.
    """
    global _shared
    with _shared_lock:
        if _shared is None:
            _shared = Sampler(open_backend(), **settings)
        sampler = _shared
    if start:
        sampler.start()
    return sampler
