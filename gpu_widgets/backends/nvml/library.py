"""The only module that imports pynvml: lazy, thread-safe initialisation and shutdown.

Importing gpu_widgets never loads NVML. The first caller of ``Nvml.ensure()`` initialises it
under a lock; a failure is kept (as a NoGpu exception with NVML's reason) until ``reset()``.
NVML is shut down at interpreter exit.
"""
from __future__ import annotations

import atexit
import threading
from typing import Any

from ..inflight import calling
from .errors import NO_GPU, classify


class NoGpu(Exception):
    """NVML cannot be used here; ``str(exc)`` is the reason, in NVML's words."""


class Nvml:
    """A handle on the NVML library, initialised on first use."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._module: Any = None
        self._failure: str | None = None
        self._exit_hook = False

    def ensure(self) -> Any:
        """Return the initialised pynvml module, or raise NoGpu with the reason."""
        module = self._module
        if module is not None:
            return module
        with self._lock:
            if self._module is not None:
                return self._module
            if self._failure is not None:
                raise NoGpu(self._failure)
            try:
                import pynvml
            except ImportError as exc:  # the dependency is declared; this is a broken install
                self._failure = f"the nvidia-ml-py package is not importable ({exc})"
                raise NoGpu(self._failure) from None
            calling("nvmlInit")  # a driver without persistence mode can take seconds here
            try:
                pynvml.nvmlInit()
            except Exception as exc:
                failure = classify(exc)
                self._failure = failure.reason if failure.kind == NO_GPU else f"NVML failed to start: {failure.reason}"
                raise NoGpu(self._failure) from None
            if not self._exit_hook:
                atexit.register(self.shutdown)
                self._exit_hook = True
            self._module = pynvml
            return pynvml

    def shutdown(self) -> None:
        """Release NVML; safe to call at any time, any number of times."""
        with self._lock:
            module, self._module = self._module, None
            if module is not None:
                try:
                    module.nvmlShutdown()
                except Exception:
                    pass  # nothing useful to do at exit

    def reset(self) -> None:
        """Forget a failed initialisation so the next ensure() tries again (driver reloaded)."""
        with self._lock:
            self._failure = None


# One per process: NVML's own init is refcounted, but one owner keeps shutdown simple.
NVML = Nvml()
