"""The ``samples`` answers (a GPU history): bounded, made off the event loop, shared, and the
memory they took handed back.

- Bounded: all GPUs together hold at most ``max_response_points`` points, whatever the client asks
  (``max_points`` is lowered and the answer says so).
- Off the loop: answers over a few samples are made on one worker thread, so heavy clients queue
  behind each other instead of each holding a copy of the history and its JSON at once.
- Shared: identical requests waiting for the worker get one answer; a whole-window answer serves
  for up to ``WINDOW_REUSE_S``; requests that cover the same samples of the latest one (tabs
  polling each second, each with its own ``since``) share one answer.
"""
from __future__ import annotations

import ctypes
import threading
import time
from concurrent.futures import Future, ThreadPoolExecutor
from functools import partial
from json import dumps as _dumps
from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Any

from ..metrics.throttle import json_names
from .gzipped import SharedBody

if TYPE_CHECKING:
    from ..store.history import History

HISTORY_WORKERS = 1
# How long the history worker runs before it lets the event loop in (see _make).
YIELD_EVERY_S = 0.002
# A whole-window answer serves every request for that long, new samples or not: at 10 Hz it would
# otherwise be made again each tick for clients that keep asking for the hour (their next
# increment brings what it missed).
WINDOW_REUSE_S = 1.0
# Answers for part of the window kept for the latest sample (distinct spans or max_points).
INCREMENTS_KEPT = 16
# The fewest points per device an answer has (downsampling needs 2: a bucket's min and max).
MIN_POINTS = 2
# An answer at least this big (bytes) gives freed memory back to the OS when the worker is idle.
TRIM_AFTER_BYTES = 1 << 20
_malloc_trim = getattr(ctypes.CDLL(None), "malloc_trim", None)  # glibc only


def release_freed_memory() -> None:
    """glibc keeps the pages a big answer freed in its heaps (RSS stays up after the clients
    leave: measured in benchmarks/history_load.py); malloc_trim gives them back to the OS."""
    if _malloc_trim is not None:
        _malloc_trim(0)


class SamplesAnswers:
    """The answers over one sampler's history. Handed what they read, as callables because the
    sampler exists only once the backend has opened (on a thread): ``store`` its ``History``
    (None before), ``latest`` its latest snapshot, ``status`` the service's status of now."""

    def __init__(self, store: Callable[[], History | None], latest: Callable[[], Mapping[str, Any] | None],
                 status: Callable[[], Mapping[str, Any]], max_response_points: int = 32000) -> None:
        self._store, self._latest, self._status = store, latest, status
        self.max_response_points = max_response_points
        # The last whole-window answer, keyed by (max_points, samples appended), and when it was
        # made: a hundred tabs opening at once share one downsampling and one serialisation of the hour.
        self._window_json: tuple[tuple[int, int], float, SharedBody] | None = None
        self._window_lock = threading.Lock()
        # Answers for part of the window by (samples appended, samples covered, points, status).
        self._increments: dict[tuple[Any, ...], SharedBody] = {}
        self._increments_lock = threading.Lock()
        self._history_pool = ThreadPoolExecutor(HISTORY_WORKERS, thread_name_prefix="gpu-widgets-history")
        self._inflight: dict[tuple[Any, Any, int], Future[SharedBody]] = {}  # identical requests share one answer
        self._inflight_lock = threading.Lock()
        self._queued = 0  # answers waiting for or on the worker

    def stop(self) -> None:
        self._history_pool.shutdown(wait=False, cancel_futures=True)

    def points_per_device(self, max_points: int) -> int:
        """``max_points`` lowered so that every device together stays within
        ``max_response_points``: the size of an answer is bounded whatever the parameters."""
        history = self._store()
        n = history.device_count if history is not None else 0
        return min(max_points, max(MIN_POINTS, self.max_response_points // max(1, n)))

    def cost(self, since: float | None) -> int:
        """Samples x devices a ``samples`` answer covers before downsampling (its work)."""
        history = self._store()
        if history is None:
            return 0
        return history.count_since(since) * max(1, history.device_count)

    def body(self, since: float | None, max_points: int, until: float | None = None) -> SharedBody:
        """The answer without its closing brace (the handler adds server_time), shared by the
        requests that cover the same samples, its gzip made at most once (gzipped.py). With
        ``until`` (a client filling in older history: rare) it is made for that request alone."""
        max_points = self.points_per_device(max_points)
        history = self._store()
        if history is None or until is not None:
            return _shared(self._make(since, max_points, until))
        if not history.whole_window(since):
            return self._increment(history, since, max_points)
        with self._window_lock:  # tabs asking at the same moment wait for one answer and share it
            hit = self._window_hit(history, max_points)
            if hit is not None:
                return hit
            body = _shared(self._make(since, max_points))
            self._window_json = ((max_points, history.appended), time.monotonic(), body)
            return body

    def _window_hit(self, history: History, max_points: int) -> SharedBody | None:
        """The whole-window answer made for this sample (or within WINDOW_REUSE_S), if any."""
        cached = self._window_json  # one read of a tuple replaced whole
        if cached is not None and cached[0][0] == max_points and (
                cached[0] == (max_points, history.appended) or time.monotonic() - cached[1] < WINDOW_REUSE_S):
            return cached[2]
        return None

    def ready(self, since: float | None, max_points: int) -> SharedBody | None:
        """The answer ``body`` would give, if it is made already (and gzipped where worth it):
        a hundred tabs opening at once then take it on the loop, without a hop to the worker
        each (~2 ms of GIL hand-overs apiece). None otherwise. Never waits for a lock the worker
        holds while it makes an answer."""
        history = self._store()
        if history is None:
            return None
        max_points = self.points_per_device(max_points)
        if history.whole_window(since):
            hit = self._window_hit(history, max_points)  # without the lock the worker may hold
        else:
            hit = self._increments.get(self._increment_key(history, since, max_points))
        if hit is None or hit.worth_compressing() and not hit.deflated:
            return None
        return hit

    def body_in_worker(self, since: float | None, max_points: int,
                       until: float | None = None) -> Future[SharedBody]:
        """``body`` on the history worker, gzip included; a request identical to one already
        waiting or running shares its answer (six tabs asking for the whole hour make one)."""
        history = self._store()
        whole = until is None and (history is None or history.whole_window(since))
        key = ("window" if whole else since, until, self.points_per_device(max_points))
        with self._inflight_lock:
            future = self._inflight.get(key)
            made = future is None
            if future is None:
                future = self._inflight[key] = self._history_pool.submit(self._work, since, max_points, until)
                self._queued += 1
        if made:  # outside the lock: a callback on a finished future runs right here
            future.add_done_callback(partial(self._forget, key))
        return future

    def _work(self, since: float | None, max_points: int, until: float | None) -> SharedBody:
        body = _shared("}")
        try:
            body = self.body(since, max_points, until)
            if body.worth_compressing():
                body.deflate()  # here, not on the event loop (zlib lets the GIL go meanwhile)
            return body
        finally:
            with self._inflight_lock:
                self._queued -= 1
                idle = not self._queued
            if idle and len(body) >= TRIM_AFTER_BYTES:
                release_freed_memory()

    def _forget(self, key: tuple[Any, Any, int], future: Future[SharedBody]) -> None:
        with self._inflight_lock:
            if self._inflight.get(key) is future:
                del self._inflight[key]

    def json(self, since: float | None, max_points: int) -> str:
        """The ``samples`` answer as JSON, all but ``server_time`` (the handler adds the clock at
        the moment it answers). An answer that covers the whole window is made at most once per
        tick, or per ``WINDOW_REUSE_S`` when that is longer."""
        return self.body(since, max_points).raw.decode() + "}"

    def _increment(self, history: History, since: float | None, max_points: int) -> SharedBody:
        """A part of the window: shared by the requests that cover the same samples. Every tab
        polls the same new samples each second, with its own ``since``; on 64 GPUs each answer
        was ~7 ms of the event loop's time (it is made there, see handlers.py)."""
        key = self._increment_key(history, since, max_points)
        covered = key[:2]
        with self._increments_lock:
            hit = self._increments.get(key)
        if hit is not None:
            return hit
        body = _shared(self._make(since, max_points))
        if (history.appended, history.count_since(since)) == covered:  # no sample came meanwhile
            with self._increments_lock:
                if len(self._increments) >= INCREMENTS_KEPT or any(k[0] != covered[0] for k in self._increments):
                    self._increments.clear()  # only the latest sample's answers are asked again
                self._increments[key] = body
        return body

    def _increment_key(self, history: History, since: float | None, max_points: int) -> tuple[Any, ...]:
        status = self._status()
        return (history.appended, history.count_since(since), max_points, status["backend"], status["status"],
                status["interval_s"])

    def _make(self, since: float | None, max_points: int, until: float | None = None) -> str:
        times, devices = self.history(since, max_points, until)
        # Each device also carries why its latest values are null, so a client that only polls
        # the history can still explain a gap.
        latest = self._latest()
        reasons = {d["index"]: d.get("unavailable") or {} for d in (latest["devices"] if latest else ())}
        status = self._status()
        head = _dumps({
            "backend": status["backend"],
            "status": status["status"],
            "interval_s": status["interval_s"],
            "window_s": status["window_s"],
            "max_points": max_points,
            "timestamps": times,
        }, allow_nan=False)
        # One device serialised at a time: its lists are freed before the next one is made.
        pieces = [head[:-1], ',"devices":[']
        held_since = time.perf_counter()
        for i, dev in enumerate(devices):
            dev["throttle_reasons"] = [json_names(m) for m in dev["throttle_reasons"]]  # masks until now
            dev["unavailable"] = reasons.get(dev["index"], {})
            if i:
                pieces.append(",")
            pieces.append(_dumps(dev, allow_nan=False))
            if time.perf_counter() - held_since > YIELD_EVERY_S:
                # Hand the GIL to the event loop if it waits for it, rather than at the 5 ms switch
                # interval (each of its socket calls would wait that long again). sleep(0) does.
                time.sleep(0)
                held_since = time.perf_counter()
        pieces.append("]}")
        return "".join(pieces)

    def history(self, since: float | None, max_points: int, until: float | None = None) -> tuple[list[float], Any]:
        """The timestamps and an iterator of devices (``History.since_lazily``). Downsampling an
        hour of many GPUs is real work: callers run this in the history worker unless they ask
        for a few samples only (``cost``)."""
        history = self._store()
        if history is None:
            return [], iter(())
        return history.since_lazily(since, max_points=max_points, until=until)


def _shared(text: str) -> SharedBody:
    """A JSON object's answer without its closing brace (each answer adds its own end)."""
    return SharedBody(text[:-1].encode())
