"""Seconds a model spends in its forward, per step, without slowing the step down.

``ForwardTimer(model)`` hooks the outermost module only (a forward pre-hook and a forward hook);
where no module hook fires, the caller says where the forward begins and ends with ``enter()`` and
``leave()`` (Lightning calls ``training_step`` itself, never the module, under DDP too). Only
forwards in training mode count, so validation between epochs does not, and a forward called
inside the timed one (a ``training_step`` that calls ``self(x)``) is part of it, not timed again.
On CPU the hooks stamp ``time.perf_counter()``. On CUDA, kernels run after the Python call
returns, so the hooks record a pair of CUDA events on the model's current stream, and the
monitor's thread reads them later (``event.query()``, then ``elapsed_time``): the training thread
never synchronizes. Events are reused once read; at most MAX_PENDING pairs wait to be read,
further forwards are not timed (``dropped``) until the reader catches up.

The hooks also tell the rank's heartbeat "forward" and "after_forward" (two attribute stores).
torch is never imported here: a module can only exist when the user imported torch already.
"""
from __future__ import annotations

import sys
import time
from collections import deque
from typing import Any, Callable

from .heartbeat import Heartbeat

MAX_PENDING = 1024  # event pairs (CUDA) or timings (CPU) waiting for the monitor's thread
MAX_POOL = 64  # read events kept for reuse


def check_model(model: Any, owner: str = "TrainingMonitor(model=...)") -> None:
    """TypeError unless ``model`` is a torch.nn.Module (torch not imported for the check)."""
    torch = sys.modules.get("torch")
    nn = getattr(torch, "nn", None)
    if nn is None or not isinstance(model, nn.Module):
        raise TypeError(f"{owner} takes a torch.nn.Module, whose forward is timed, got {type(model).__name__} "
                        f"{_short(model)}; pass the model itself (or the DDP/FSDP wrapper around it)")


def _short(value: Any) -> str:
    text = repr(value)
    return text if len(text) <= 60 else text[:57] + "..."


class ForwardTimer:
    """Times ``model``'s forwards; ``take()`` on the monitor's thread, ``remove()`` to unhook.

    ``events``: a factory of timing events (``query()``, ``record(stream)``, ``elapsed_time()``
    in ms): given, the event path is used whatever the model's device (for tests); by default
    ``torch.cuda.Event(enable_timing=True)`` when the model's parameters are on a CUDA device.
    """

    def __init__(self, model: Any, beat: Heartbeat | None = None,
                 events: Callable[[], Any] | None = None) -> None:
        check_model(model)
        self.beat = beat if beat is not None else Heartbeat()
        self._events = events
        self._stream: Callable[[], Any] | None = None  # the current stream of the model's device
        self._mode: str | None = None  # "cpu" or "events", chosen at the first forward
        self._began: tuple[float, Any] | None = None  # (perf_counter, start event or None)
        self.pending: deque[tuple[float, Any, Any]] = deque()  # (perf_counter, start, end) not read yet
        self.done: deque[tuple[float, float]] = deque(maxlen=MAX_PENDING)  # CPU: (perf_counter, seconds)
        self.pool: list[Any] = []
        self.dropped = 0
        self.problem: str | None = None  # why timing stopped (the monitor's thread reports it)
        self._depth = 0  # forwards under way: a forward called inside the timed one is not timed again
        # always_call: the hook runs when the forward raises too, so the depth stays right
        self._handles = [model.register_forward_pre_hook(self._pre),
                         model.register_forward_hook(self._post, always_call=True)]

    # -- the training thread ----------------------------------------------------------------------
    def _choose(self, module: Any) -> None:
        if self._events is not None:
            self._mode = "events"
            return
        param = next(module.parameters(), None)
        device = getattr(param, "device", None)
        if getattr(device, "type", None) == "cuda":
            torch = sys.modules["torch"]
            self._events = lambda: torch.cuda.Event(enable_timing=True)
            self._stream = lambda: torch.cuda.current_stream(device)
            self._mode = "events"
        else:
            self._mode = "cpu"

    def _pre(self, module: Any, args: Any) -> None:
        self._depth += 1
        if self._depth > 1 or not module.training or self._mode == "off":
            return
        try:
            self._start(module)
        except Exception as exc:  # the user's forward goes on, untimed
            self._fail(exc)

    def _start(self, module: Any) -> None:
        t = time.perf_counter()
        self.beat.state = ("forward", t)
        if self._mode is None:
            self._choose(module)
        if self._mode == "cpu":
            self._began = (t, None)
            return
        if len(self.pending) >= MAX_PENDING:
            self.dropped += 1  # the reader is behind: no more events until it catches up
            self._began = None
            return
        start = self._event()
        self._record(start)
        self._began = (t, start)

    def _post(self, module: Any, args: Any, output: Any) -> None:
        self._depth = max(0, self._depth - 1)
        if self._depth:
            return
        began, self._began = self._began, None
        if self._mode == "off" or (began is None and not module.training):  # eval forwards: untouched
            return
        try:
            self._end(began)
        except Exception as exc:
            self._fail(exc)

    def _end(self, began: tuple[float, Any] | None) -> None:
        t = time.perf_counter()
        self.beat.state = ("after_forward", t)
        if began is None:
            return
        if began[1] is None:
            self.done.append((began[0], t - began[0]))
            return
        end = self._event()
        self._record(end)
        self.pending.append((began[0], began[1], end))

    def _fail(self, exc: Exception) -> None:
        self._mode = "off"
        self.problem = f"timing the model's forward stopped: {type(exc).__name__}: {exc}"

    def _event(self) -> Any:
        try:
            return self.pool.pop()
        except IndexError:
            return self._events()  # type: ignore[misc]

    def _record(self, event: Any) -> None:
        if self._stream is None:
            event.record()
        else:
            event.record(self._stream())

    def enter(self, module: Any) -> None:
        """A forward begins that no module hook sees (Lightning's ``training_step``, which DDP and
        the trainer call directly): timed as the hooked forward is; one inside it is not timed again."""
        self._pre(module, ())

    def leave(self, module: Any) -> None:
        """The forward ``enter()`` began has ended (idempotent: a second call does nothing)."""
        if self._depth:
            self._post(module, (), None)

    # -- the monitor's thread ---------------------------------------------------------------------
    def take(self) -> list[tuple[float, float]]:
        """The forwards finished since the last call: (perf_counter at the forward's start,
        seconds in it), oldest first. A CUDA forward counts once its end event has completed.
        Never raises: a CUDA error stops the timing and says why in ``problem``."""
        out: list[tuple[float, float]] = []
        done = self.done
        while done:
            out.append(done.popleft())
        pending = self.pending
        try:
            while pending:
                t, start, end = pending[0]
                if not end.query():
                    break  # the GPU has not got there yet; the events after it neither (one stream)
                pending.popleft()
                out.append((t, max(0.0, start.elapsed_time(end) / 1000.0)))
                if len(self.pool) < MAX_POOL:
                    self.pool.extend((start, end))
        except Exception as exc:  # a CUDA error: the caller's pass goes on, timing stops
            self._fail(exc)
            pending.clear()
        return out

    def remove(self) -> None:
        """Unhook the model (idempotent). Events not read yet are dropped."""
        for handle in self._handles:
            handle.remove()
        self._handles = []
        self.pending.clear()
