"""The stale message names the hung call from what the code records before calling, not from the
names of modules, functions or locals on the stuck thread's stack: a driver stand-in whose functions
live in another module (and hang in a method called ``_gpu``) is named just as pynvml is.

Time is a hand clock: the test moves it past the staleness limit once the call is known to hang.
"""
from __future__ import annotations

import re
import threading
import time
from typing import Any, Callable

import pynvml
import pytest

from gpu_widgets.backends import SimulatedBackend, inflight
from gpu_widgets.backends.nvml.backend import NvmlBackend
from gpu_widgets.backends.nvml.readers import FAST_QUERIES, SLOW_QUERIES, STATIC_QUERIES, call_of
from gpu_widgets.sampling.clock import Clock
from gpu_widgets.sampling.sampler import Sampler
from gpu_widgets.sampling.stall import name_of, waiting_on

from .fake_pynvml import FakeNvml, h100


class HandClock(Clock):
    """Monotonic and wall time move only when the test says; waits are short real sleeps, so the
    sampler's loops keep turning (and keep the time where the test left it)."""

    def __init__(self) -> None:
        self.now = 1000.0

    def monotonic(self) -> float:
        return self.now

    def wall(self) -> float:
        return 1_700_000_000.0 + self.now

    def wait(self, event: threading.Event, timeout: float) -> bool:
        return event.wait(0.02)


class StuckDriver(FakeNvml):
    """FakeNvml (module tests.fake_pynvml, nothing named pynvml on the stack) whose ``hang`` call on
    GPU ``gpu`` blocks until ``release`` is set."""

    def __init__(self, hang: str, gpu: int) -> None:
        super().__init__([h100(procs=[(4242, 1 << 30)]), h100()])
        self.hang, self.gpu = hang, gpu
        self.armed, self.entered, self.release = threading.Event(), threading.Event(), threading.Event()

    def _gpu(self, fn: str, handle: Any) -> dict[str, Any]:
        if self.armed.is_set() and fn == self.hang and handle.index == self.gpu:
            self.entered.set()
            self.release.wait(30)
        return super()._gpu(fn, handle)


def wait_until(predicate: Callable[[], Any], timeout: float = 10.0) -> Any:
    deadline = time.monotonic() + timeout
    while not (value := predicate()):
        assert time.monotonic() < deadline, "timed out"
        time.sleep(0.01)
    return value


@pytest.fixture
def clock() -> HandClock:
    return HandClock()


def test_a_hung_fast_call_is_named_with_its_gpu(clock):
    driver = StuckDriver("nvmlDeviceGetPowerUsage", gpu=1)
    sampler = Sampler(NvmlBackend(nvml=driver), interval_s=1.0, clock=clock).start()
    try:
        wait_until(lambda: sampler.latest is not None)
        driver.armed.set()
        assert driver.entered.wait(10)
        assert sampler.staleness() == (0.0, None)  # inside the call, but not late yet
        clock.now += 10.0  # past 3 intervals
        assert sampler.staleness() == (10.0, "nvmlDeviceGetPowerUsage on GPU 1 has not returned")
        driver.release.set()
        wait_until(lambda: sampler.staleness()[1] is None)
    finally:
        driver.release.set()
        sampler.stop()


def test_a_hung_slow_call_is_named_in_the_slow_fields_reason(clock):
    driver = StuckDriver("nvmlDeviceGetComputeRunningProcesses_v3", gpu=0)
    sampler = Sampler(NvmlBackend(nvml=driver), interval_s=1.0, slow_interval_s=1.0, clock=clock).start()
    try:
        wait_until(lambda: sampler.latest is not None and sampler.latest["devices"][0]["processes"])
        driver.armed.set()
        assert driver.entered.wait(10)
        clock.now += 10.0
        reason = wait_until(lambda: sampler.latest["devices"][0]["unavailable"].get("processes"))
        assert reason == "not read for 10 s: nvmlDeviceGetComputeRunningProcesses_v3 on GPU 0 has not returned"
        assert sampler.staleness()[1] is None  # the fast fields go on
    finally:
        driver.release.set()
        sampler.stop()


def test_a_call_that_hangs_while_opening_is_named(clock):
    driver = StuckDriver("nvmlDeviceGetMemoryBusWidth", gpu=1)
    driver.armed.set()
    sampler = Sampler(NvmlBackend(nvml=driver), interval_s=1.0, clock=clock)
    opener = threading.Thread(target=sampler.start, daemon=True)
    opener.start()
    try:
        assert driver.entered.wait(10)
        clock.now += 6.0  # past the start-up grace
        assert sampler.staleness() == (None, "nvmlDeviceGetMemoryBusWidth on GPU 1 has not returned")
    finally:
        driver.release.set()
        opener.join(10)
        sampler.stop()


def test_a_hung_subscriber_is_named_by_its_code_and_an_idle_thread_by_nothing(clock):
    release = threading.Event()
    entered = threading.Event()

    def slow_chart_update(snapshot: Any) -> None:
        entered.set()
        release.wait(30)

    backend = SimulatedBackend(n_gpus=1)
    sampler = Sampler(backend, interval_s=1.0, clock=clock)
    sampler.subscribe(slow_chart_update)
    sampler.start()
    try:
        assert entered.wait(10)
        clock.now += 10.0
        why = sampler.staleness()[1]
        assert why == f"{__name__}.{slow_chart_update.__qualname__} has not returned"
    finally:
        release.set()
        sampler.stop()


def test_waiting_on_a_thread_that_recorded_nothing_finished_or_is_between_calls():
    done, go = threading.Event(), threading.Event()

    def between_calls() -> None:
        inflight.here().enter(None)
        done.set()
        go.wait(10)

    idle = threading.Thread(target=between_calls, daemon=True)
    quiet = threading.Thread(target=go.wait, args=(10,), daemon=True)
    idle.start()
    quiet.start()
    try:
        assert done.wait(10)
        assert waiting_on(idle) is None and waiting_on(quiet) is None
    finally:
        go.set()
        idle.join(10)
    assert waiting_on(idle) == "the sampler thread stopped (see the log)"
    assert waiting_on(None) == "the sampler thread stopped (see the log)"


def test_steps_are_named_where_their_code_is():
    backend = SimulatedBackend(n_gpus=1)
    assert name_of(backend.read_fast) == "gpu_widgets.backends.simulated.SimulatedBackend.read_fast"
    assert name_of(waiting_on) == "gpu_widgets.sampling.stall.waiting_on"

    class Callback:
        def __call__(self, snapshot: Any) -> None: ...

    assert name_of(Callback()).endswith("test_steps_are_named_where_their_code_is.<locals>.Callback.__call__")


@pytest.mark.parametrize("query", [*FAST_QUERIES, *SLOW_QUERIES, *STATIC_QUERIES], ids=lambda q: q.key)
def test_every_reader_names_the_nvml_function_it_calls(query):
    call = call_of(query)
    assert call is not None, f"{query.key}: its reader names no NVML function (readers.calls)"
    # A pynvml function, or the versioned C entry point one of them enters (nvmlDeviceGetMemoryInfo_v2).
    assert hasattr(pynvml, call) or hasattr(pynvml, re.sub(r"_v\d+$", "", call)), call
