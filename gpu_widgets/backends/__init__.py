"""Choosing a backend: ``auto`` (NVML, else the no-GPU state with its reason), ``nvml`` or
``simulated``. The library never falls back to simulated GPUs on its own; only an explicit
choice (argument or ``GPU_WIDGETS_BACKEND``) gives them.
"""
from __future__ import annotations

import os
from collections.abc import Mapping

from .base import NO_GPU, OK, Backend, NoGpuBackend
from .faults import Fault, parse_faults
from .simulated import SimulatedBackend

CHOICES = ("auto", "nvml", "simulated")
ENV_BACKEND = "GPU_WIDGETS_BACKEND"
ENV_GPUS = "GPU_WIDGETS_SIMULATED_GPUS"
ENV_SEED = "GPU_WIDGETS_SIMULATED_SEED"
ENV_FAULTS = "GPU_WIDGETS_SIMULATED_FAULTS"
MAX_SIMULATED_GPUS = 64


class ConfigError(ValueError):
    """A bad backend setting; the message names the setting and the valid values."""


def _int_env(env: Mapping[str, str], name: str, default: int, lo: int, hi: int) -> int:
    raw = env.get(name, "").strip()
    if not raw:
        return default
    try:
        value = int(raw)
    except ValueError:
        raise ConfigError(f"{name}={raw!r} is not a whole number (expected {lo}-{hi})") from None
    if not lo <= value <= hi:
        raise ConfigError(f"{name}={value} is out of range (expected {lo}-{hi})")
    return value


def simulated_from_env(env: Mapping[str, str] | None = None) -> SimulatedBackend:
    env = os.environ if env is None else env
    n = _int_env(env, ENV_GPUS, 2, 1, MAX_SIMULATED_GPUS)
    seed = _int_env(env, ENV_SEED, 0, 0, 2**31 - 1)
    try:
        faults = parse_faults(env.get(ENV_FAULTS))
        return SimulatedBackend(n_gpus=n, seed=seed, faults=faults)
    except ValueError as exc:
        raise ConfigError(f"{ENV_FAULTS}: {exc}") from None


def resolve_choice(choice: str | None = None, env: Mapping[str, str] | None = None) -> str:
    env = os.environ if env is None else env
    value = (choice if choice is not None else env.get(ENV_BACKEND, "") or "auto").strip().lower()
    if value not in CHOICES:
        source = "backend" if choice is not None else ENV_BACKEND
        raise ConfigError(f"{source}={value!r} is not a backend: use one of {', '.join(CHOICES)}")
    return value


def open_backend(choice: str | None = None, env: Mapping[str, str] | None = None) -> Backend:
    """An opened backend. Raises ConfigError only for bad settings, never for a missing GPU."""
    value = resolve_choice(choice, env)
    if value == "simulated":
        backend: Backend = simulated_from_env(env)
        backend.open()
        return backend
    from .nvml import NvmlBackend  # keeps pynvml out of processes that never ask for NVML

    nvml_backend = NvmlBackend()
    nvml_backend.open()
    if nvml_backend.status != OK:
        return NoGpuBackend(nvml_backend.reason or "NVML is not available")
    return nvml_backend


__all__ = [
    "CHOICES",
    "NO_GPU",
    "OK",
    "Backend",
    "ConfigError",
    "Fault",
    "NoGpuBackend",
    "SimulatedBackend",
    "open_backend",
    "parse_faults",
    "resolve_choice",
]
