"""Which call each thread is making now, so that a thread stuck in a driver call can be named.

Whoever makes a call that may hang writes it into its thread's ``Doing`` first: the NVML backend
the NVML function and the GPU (one attribute store per call), the sampler the backend read or
subscriber it calls. Nothing is locked and nothing is formatted on that path; another thread reads
the slot only when a sample is already stale (sampling/stall.py), and the stuck thread is not
moving then. A name recorded is the name the code calls by, so renaming a module or a function
cannot change what the stale message says.
"""
from __future__ import annotations

import threading
import weakref
from typing import Any


class Doing:
    """What one thread is in: ``step`` (a callable the sampler called), inside it ``call`` (the
    NVML function) on ``gpu`` (its index). None: not inside one."""

    __slots__ = ("step", "call", "gpu")

    def __init__(self) -> None:
        self.step: Any = None
        self.call: str | None = None
        self.gpu: int | None = None

    def enter(self, step: Any) -> None:
        """Start ``step`` (None: idle); the calls of the step before are over."""
        self.call = self.gpu = None
        self.step = step


# Thread -> its slot, for readers on other threads; weak, so a finished thread takes its slot along.
_of_thread: weakref.WeakKeyDictionary[threading.Thread, Doing] = weakref.WeakKeyDictionary()
_lock = threading.Lock()


class _Local(threading.local):
    def __init__(self) -> None:  # runs once in each thread, on its first look
        self.doing = Doing()
        with _lock:
            _of_thread[threading.current_thread()] = self.doing


_local = _Local()


def here() -> Doing:
    """The calling thread's slot (made on its first use)."""
    return _local.doing


def of(thread: threading.Thread) -> Doing | None:
    """``thread``'s slot; None when it never recorded a call."""
    with _lock:
        return _of_thread.get(thread)


def calling(name: str | None) -> None:
    """Record the NVML function this thread calls next (None: one without a name, which the
    step's name then stands for). A thread-local look-up: the per-tick loop stores into the slot
    it holds instead."""
    _local.doing.call = name
