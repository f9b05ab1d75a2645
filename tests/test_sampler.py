"""The sampler: drift-free ticks (controllable clock), floor, lifecycle, subscribers, slow reads."""
from __future__ import annotations

import threading
import time

import pytest

from gpu_widgets.backends import SimulatedBackend
from gpu_widgets.backends.base import Backend
from gpu_widgets.sampling.clock import next_deadline
from gpu_widgets.sampling.sampler import MIN_INTERVAL_S, Sampler, checked_interval


class FakeClock:
    """Time moves only when the sampler waits or when a read 'takes' time."""

    def __init__(self) -> None:
        self.t = 100.0
        self.lock = threading.Lock()

    def monotonic(self) -> float:
        return self.t

    def wall(self) -> float:
        return 1_700_000_000.0 + self.t

    def advance(self, dt: float) -> None:
        with self.lock:
            self.t += dt

    def wait(self, event: threading.Event, timeout: float) -> bool:
        if event.is_set():
            return True
        if threading.current_thread().name != "gpu-widgets-sampler":
            return event.wait(1.0)  # only the fast loop moves fake time
        self.advance(max(timeout, 0.0))
        time.sleep(0)  # let the other thread run
        return event.is_set()


class SlowReadBackend(Backend):
    """A backend whose reads take scripted (fake) time."""

    name = "simulated"

    def __init__(self, clock: FakeClock, fast_cost: list[float], slow_block: threading.Event | None = None) -> None:
        super().__init__()
        self.clock, self.fast_cost, self.slow_block = clock, fast_cost, slow_block
        self.slow_reads = 0

    def open(self) -> None:
        pass

    def device_info(self):
        return [{"index": 0, "uuid": "GPU-x"}]

    def read_fast(self, t):
        cost = self.fast_cost.pop(0) if self.fast_cost else 0.0
        self.clock.advance(cost)
        return [{"index": 0, "uuid": "GPU-x", "name": "x", "status": "ok", "utilization_gpu_percent": 1, "unavailable": {}}]

    def read_slow(self, t):
        self.slow_reads += 1
        if self.slow_block is not None:
            self.slow_block.wait(10)
        return [{"index": 0, "processes": [], "pcie_tx_bytes_per_s": 1, "pcie_rx_bytes_per_s": 2, "unavailable": {}}]


def test_next_deadline_stays_on_the_grid_and_skips_missed_ticks():
    assert next_deadline(10.0, 1.0, 10.0) == (11.0, 1)
    assert next_deadline(10.0, 1.0, 10.3) == (11.0, 1)
    assert next_deadline(10.0, 1.0, 12.7) == (13.0, 3)  # overran: ticks 1 and 2 are skipped
    assert next_deadline(10.0, 0.25, 10.25) == (10.5, 2)


def collect(sampler: Sampler, n: int) -> list[dict]:
    got: list[dict] = []
    done = threading.Event()

    def on_tick(snap):
        got.append(snap)
        if len(got) >= n:
            done.set()

    sampler.subscribe(on_tick)
    sampler.start()
    assert done.wait(10), f"only {len(got)} ticks"
    sampler.stop()
    return got[:n]


def test_ticks_do_not_drift_when_reads_take_time():
    clock = FakeClock()
    # each read costs 0.3 s of the 1 s interval, one read overruns by 1.4 s
    backend = SlowReadBackend(clock, [0.3, 0.3, 0.3, 2.4, 0.3, 0.3, 0.3, 0.3])
    sampler = Sampler(backend, interval_s=1.0, clock=clock)
    snaps = collect(sampler, 7)
    starts = [s["timestamp"] - 1_700_000_000.0 for s in snaps]
    t0 = starts[0]
    offsets = [round(s - t0, 9) for s in starts]
    # tick 3 ran from 3.0 to 5.4, so the grid points 4 and 5 are skipped, then back on the grid
    assert offsets == [0.0, 1.0, 2.0, 3.0, 6.0, 7.0, 8.0]
    assert sampler.skipped_ticks == 2


def test_interval_has_a_floor_and_rejects_nonsense():
    with pytest.warns(UserWarning, match="floor"):
        assert checked_interval(0.01) == MIN_INTERVAL_S
    for bad in (0, -1, float("nan"), float("inf"), "fast", None):
        with pytest.raises(ValueError, match="interval_s"):
            checked_interval(bad)
    sampler = Sampler(SimulatedBackend(n_gpus=1), interval_s=0.5)
    with pytest.warns(UserWarning):
        sampler.interval_s = 0.001
    assert sampler.interval_s == MIN_INTERVAL_S


def test_start_and_stop_are_idempotent_and_stop_is_prompt():
    sampler = Sampler(SimulatedBackend(n_gpus=2), interval_s=0.1)
    sampler.start()
    sampler.start()
    assert sampler.running
    assert len([t for t in threading.enumerate() if t.name.startswith("gpu-widgets")]) == 2
    time.sleep(0.35)
    t = time.monotonic()
    sampler.stop()
    sampler.stop()
    assert time.monotonic() - t < 2.0  # wide margin: stopping does not wait out an interval
    assert not sampler.running
    assert sampler.latest is not None and len(sampler.latest["devices"]) == 2
    sampler.start()  # restartable
    assert sampler.running
    sampler.stop()


def test_a_raising_subscriber_does_not_stop_sampling_or_other_subscribers():
    clock = FakeClock()
    sampler = Sampler(SlowReadBackend(clock, []), interval_s=1.0, clock=clock)

    def bad(snap):
        raise RuntimeError("subscriber bug")

    sampler.subscribe(bad)
    snaps = collect(sampler, 5)
    assert len(snaps) == 5
    assert sampler.subscriber_errors >= 5


def test_unsubscribe_stops_callbacks():
    sampler = Sampler(SimulatedBackend(n_gpus=1), interval_s=1.0)
    sampler.backend.open()
    seen = []
    unsubscribe = sampler.subscribe(seen.append)
    sampler.tick()
    unsubscribe()
    sampler.tick()
    assert len(seen) == 1


def test_a_backend_that_raises_never_reaches_the_caller():
    class Broken(SlowReadBackend):
        def read_fast(self, t):
            raise RuntimeError("backend bug")

    clock = FakeClock()
    sampler = Sampler(Broken(clock, []), clock=clock)
    assert sampler.tick() is None
    sampler.start()
    sampler.stop()


def test_slow_reads_do_not_delay_fast_ticks():
    # The slow read blocks (like 8 PCIe-throughput calls at 20 ms); ticks go on meanwhile.
    release = threading.Event()
    backend = SlowReadBackend(FakeClock(), [], slow_block=release)
    sampler = Sampler(backend, interval_s=0.1)  # real clock
    sampler.start()
    try:
        time.sleep(1.0)
        ticks = sampler.ticks
        assert ticks >= 4, f"only {ticks} fast ticks in 1 s while the slow read was blocked"
        assert backend.slow_reads == 1
        assert sampler.latest["devices"][0]["processes"] is None
        assert "slow cadence" in sampler.latest["devices"][0]["unavailable"]["processes"]
    finally:
        release.set()
        sampler.stop()


def test_ticks_carry_the_latest_slow_read_and_fill_the_history():
    sampler = Sampler(SimulatedBackend(n_gpus=2, seed=3), interval_s=0.1, slow_interval_s=0.5)
    sampler.start()
    try:
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline and len(sampler.history) < 5:
            time.sleep(0.05)
    finally:
        sampler.stop()
    snap = sampler.latest
    assert snap["backend"] == "simulated"
    assert all(d["pcie_rx_bytes_per_s"] is not None for d in snap["devices"])
    assert len(sampler.history) >= 5
    hist = sampler.history.since(None)
    assert len(hist["timestamps"]) == len(sampler.history)


def test_a_slow_read_asked_for_comes_at_once_and_says_when_it_was_taken():
    # Given a sampler whose slow fields (process lists) are read every 5 s, past its first read
    sampler = Sampler(SimulatedBackend(n_gpus=1, seed=3), interval_s=0.1, slow_interval_s=5)
    sampler.start()
    try:
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline and sampler.slow_read_span is None:
            time.sleep(0.02)
        first = sampler.slow_read_span
        assert first is not None and first[0] <= first[1]
        # When a caller asks for a read now (it just gave memory back)
        asked = time.time()
        sampler.read_slow_soon()
        deadline = time.monotonic() + 4  # well before the next read on the 5 s grid
        while time.monotonic() < deadline and sampler.slow_read_span[0] < asked:
            time.sleep(0.02)
        # Then a read begun after the ask ended, and a sample taken after it carries it
        began, ended = sampler.slow_read_span
        assert began >= asked and ended >= began
        while time.monotonic() < deadline and sampler.latest["timestamp"] < ended:
            time.sleep(0.02)
        assert sampler.latest["timestamp"] >= ended
    finally:
        sampler.stop()


def test_slow_interval_is_bounded_for_process_freshness():
    with pytest.raises(ValueError, match="at most 5"):
        Sampler(SimulatedBackend(n_gpus=1), slow_interval_s=30)


class HangingBackend(SlowReadBackend):
    """Reads that hang (real time) until the test lets them return."""

    def __init__(self) -> None:
        super().__init__(FakeClock(), [])
        self.hang_fast = threading.Event()
        self.fast_returns = threading.Event()

    def read_fast(self, t):
        if self.hang_fast.is_set():
            self.fast_returns.wait(30)
        return super().read_fast(t)


def wait_until(predicate, timeout=10.0):
    deadline = time.monotonic() + timeout
    while not (value := predicate()):
        assert time.monotonic() < deadline, "timed out"
        time.sleep(0.02)
    return value


def test_a_hung_read_makes_the_sample_stale_naming_the_read_and_it_recovers():
    backend = HangingBackend()
    sampler = Sampler(backend, interval_s=0.1)  # real clock: stale after 2 s (3 intervals, at least 2 s)
    sampler.start()
    try:
        wait_until(lambda: sampler.latest is not None)
        age, why = sampler.staleness()
        assert why is None and age is not None and age < 5
        backend.hang_fast.set()
        why = wait_until(lambda: sampler.staleness()[1])
        assert "HangingBackend.read_fast" in why and why.endswith("has not returned")
        assert sampler.staleness()[0] > 2
        backend.hang_fast.clear()
        backend.fast_returns.set()
        wait_until(lambda: sampler.staleness()[1] is None)
    finally:
        backend.fast_returns.set()
        sampler.stop()
    assert sampler.staleness()[1] is None  # a stopped sampler is not stale


def test_a_hung_slow_read_nulls_the_slow_fields_with_the_read_named():
    release = threading.Event()
    backend = SlowReadBackend(FakeClock(), [], slow_block=release)
    sampler = Sampler(backend, interval_s=0.1, slow_interval_s=0.1)
    sampler.start()
    try:
        # Before the first slow read the fields wait 5 s (start-up grace), then say why.
        reason = wait_until(lambda: sampler.latest and sampler.latest["devices"][0]["unavailable"].get("processes")
                            and "not read yet:" in sampler.latest["devices"][0]["unavailable"]["processes"]
                            and sampler.latest["devices"][0]["unavailable"]["processes"])
        assert "SlowReadBackend.read_slow" in reason and sampler.latest["devices"][0]["processes"] is None
        assert sampler.staleness()[1] is None  # the fast fields are fresh
        release.set()
        wait_until(lambda: sampler.latest["devices"][0]["processes"] == [])
    finally:
        release.set()
        sampler.stop()
