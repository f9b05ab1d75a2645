"""Build and drive the fake NVML library (``fake_nvml.c``) used by the tests.

The fake ``libnvidia-ml.so.1`` answers NVML calls from a text config file
named by ``$FAKE_NVML_CONFIG`` and re-reads it whenever it changes. Typical
use from a test::

    lib_dir = build_fake_nvml(tmp_build_dir)
    write_config(cfg, {"gpus": [{"name": "NVIDIA H200", "util_gpu": 97}]})
    env = {**os.environ, **fake_nvml_env(lib_dir, cfg)}
    subprocess.run([sys.executable, "-c", "import pynvml; ..."], env=env)

pynvml loads the library once per process, so run code that should see the
fake in a subprocess started with that environment. See README.md.
"""

from __future__ import annotations

import fcntl
import hashlib
import json
import os
import re
import shutil
import subprocess
import tempfile
import time
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

__all__ = [
    "DEFAULT_BUILD_DIR",
    "FakeNvmlBuildError",
    "LIB_NAME",
    "SOURCE",
    "build_fake_nvml",
    "exported_functions",
    "fake_nvml_env",
    "render_config",
    "write_config",
]

SOURCE = Path(__file__).with_name("fake_nvml.c")
DEFAULT_BUILD_DIR = Path(__file__).with_name("build")
LIB_NAME = "libnvidia-ml.so.1"
CONFIG_ENV = "FAKE_NVML_CONFIG"

# Part of the cache key: changing the flags must invalidate old builds.
# The soname lets a process preload the fake by path; pynvml's later dlopen("libnvidia-ml.so.1")
# then finds it already loaded (used by the in-process server tests).
_CFLAGS = ("-shared", "-fPIC", "-O2", "-Wall", "-Wextra", "-std=gnu11", "-Wl,-soname,libnvidia-ml.so.1")
_LIBS = ("-lpthread",)

GLOBAL_KEYS = frozenset(
    {"init_error", "driver_version", "nvml_version", "cuda_driver_version", "device_count"}
)
GPU_FIELDS = frozenset(
    {
        "name", "uuid", "pci_bus_id",
        "memory_total", "memory_used", "memory_free", "memory_reserved",
        "util_gpu", "util_memory", "temperature", "fan",
        "power_mw", "power_limit_mw", "power_default_limit_mw", "energy_mj",
        "clock_graphics", "clock_sm", "clock_mem", "max_clock_sm", "max_clock_mem",
        "pstate", "clocks_event_reasons", "pcie_tx_kbps", "pcie_rx_kbps",
        "num_cores", "bus_width", "pcie_max_gen", "pcie_max_width",
        "cc_major", "cc_minor", "mig_current", "mig_pending",
        "procs", "graphics_procs",
        "gpm_supported", "gpm_mig_supported",
        "gpm_sm_util", "gpm_sm_occupancy", "gpm_tensor_util", "gpm_dram_util",
        "gpm_metric_errors", "proc_util", "mig_devices",
    }
)  # fmt: skip
_PROC_FIELDS = frozenset({"procs", "graphics_procs"})
# Tables of numbers: field -> (fewest, most) numbers a row holds (README.md, "GPM, per-process use, MIG").
_ROW_FIELDS = {"gpm_metric_errors": (2, 2), "proc_util": (3, 3), "mig_devices": (4, 8)}


class FakeNvmlBuildError(RuntimeError):
    """The fake library could not be compiled (no compiler, or it failed)."""


def exported_functions() -> frozenset[str]:
    """NVML functions the fake implements (each can be omitted at build time)."""
    return frozenset(re.findall(r"^#ifndef FAKE_NVML_OMIT_(\w+)$", SOURCE.read_text(), re.M))


def build_fake_nvml(out_dir: Path | str = DEFAULT_BUILD_DIR, omit: Iterable[str] = ()) -> Path:
    """Compile the fake library and return the directory holding ``libnvidia-ml.so.1``.

    Each omit set gets its own subdirectory of ``out_dir`` (``full`` or
    ``omit-<hash>``), so builds with different symbols coexist and a library a
    running process has mapped is never overwritten. A build is reused while
    the source (mtime and size), the omit set and the flags are unchanged.
    Raises FakeNvmlBuildError if gcc is missing or compilation fails, and
    ValueError for an omitted name the fake does not export.
    """
    omitted = sorted(set(omit))
    unknown = set(omitted) - exported_functions()
    if unknown:
        raise ValueError(f"cannot omit unknown fake NVML function(s): {sorted(unknown)}")

    cc = os.environ.get("FAKE_NVML_CC", "gcc")
    compiler = shutil.which(cc)
    if compiler is None:
        raise FakeNvmlBuildError(
            f"C compiler {cc!r} not found on PATH; the fake NVML library needs gcc "
            "(install it, or point $FAKE_NVML_CC at a compatible compiler)"
        )

    src_stat = SOURCE.stat()
    key = {
        "source_mtime_ns": src_stat.st_mtime_ns,
        "source_size": src_stat.st_size,
        "omit": omitted,
        "cflags": list(_CFLAGS),
        "compiler": compiler,
    }
    variant = "full" if not omitted else "omit-" + hashlib.sha1(",".join(omitted).encode()).hexdigest()[:12]
    lib_dir = Path(out_dir).resolve() / variant
    lib_dir.mkdir(parents=True, exist_ok=True)
    lib_path = lib_dir / LIB_NAME
    stamp = lib_dir / "build-key.json"

    # flock: parallel test workers may build the same variant at once.
    with open(lib_dir / ".lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        try:
            if lib_path.exists() and stamp.exists() and json.loads(stamp.read_text()) == key:
                return lib_dir
        except (OSError, ValueError):
            pass  # unreadable stamp: rebuild

        fd, tmp_name = tempfile.mkstemp(prefix=".build-", suffix=".so", dir=lib_dir)
        os.close(fd)
        cmd = [
            compiler,
            *_CFLAGS,
            *(f"-DFAKE_NVML_OMIT_{name}" for name in omitted),
            "-o",
            tmp_name,
            str(SOURCE),
            *_LIBS,
        ]
        try:
            proc = subprocess.run(cmd, capture_output=True, text=True)
            if proc.returncode != 0:
                raise FakeNvmlBuildError(
                    f"building the fake NVML library failed ({' '.join(cmd)}):\n{proc.stderr}"
                )
            # Replace, never rewrite in place: a process may have the old one mapped.
            os.replace(tmp_name, lib_path)
        finally:
            if os.path.exists(tmp_name):
                os.unlink(tmp_name)
        stamp.write_text(json.dumps(key))
    return lib_dir


def _scalar(key: str, value: Any) -> str:
    if isinstance(value, bool):
        value = int(value)
    if isinstance(value, int):
        if value < 0:
            raise ValueError(f"{key}: negative values are not supported ({value})")
        return str(value)
    if isinstance(value, str):
        value = value.encode()
    if isinstance(value, bytes):
        # Raw bytes (a name that is not UTF-8) travel as \xNN escapes; so does a backslash.
        if b"\n" in value or b"\r" in value:
            raise ValueError(f"{key}: value must be a single line")
        if b"\0" in value:
            raise ValueError(f"{key}: value must not contain a NUL byte")
        if len(value) >= 96:
            raise ValueError(f"{key}: string longer than 95 bytes")
        return "".join(chr(b) if 0x20 <= b < 0x7F and b != 0x5C else f"\\x{b:02x}" for b in value)
    raise TypeError(f"{key}: unsupported value type {type(value).__name__}")


def _procs(key: str, value: Any) -> str:
    if isinstance(value, str):
        return _scalar(key, value)
    items = []
    for proc in value:
        if len(proc) not in (2, 4):
            raise ValueError(f"{key}: expected (pid, bytes) or (pid, bytes, gi, ci), got {proc!r}")
        items.append(":".join(_scalar(key, int(part)) for part in proc))
    return ",".join(items)


def _rows(key: str, value: Any) -> str:
    if isinstance(value, str):
        return _scalar(key, value)
    lo, hi = _ROW_FIELDS[key.rsplit(".", 1)[-1]]
    items = []
    for row in value:
        if not lo <= len(row) <= hi:
            raise ValueError(f"{key}: rows take {lo}-{hi} numbers, got {row!r}")
        items.append(":".join(_scalar(key, int(part)) for part in row))
    return ",".join(items)


def _error_lines(prefix: str, errors: Mapping[str, int]) -> list[str]:
    return [f"{prefix}{fn} = {_scalar(prefix + fn, int(code))}" for fn, code in errors.items()]


def render_config(config: Mapping[str, Any]) -> str:
    """The config file text for ``config`` (see write_config for the dict shape)."""
    config = dict(config)
    gpus = config.pop("gpus", [])
    errors = config.pop("error", {})
    delays = config.pop("delay_ms", {})
    if isinstance(gpus, Mapping):
        gpu_items = sorted((int(i), g) for i, g in gpus.items())
    else:
        gpu_items = list(enumerate(gpus))
    if "device_count" not in config:
        config["device_count"] = max((i + 1 for i, _ in gpu_items), default=0)

    unknown = set(config) - GLOBAL_KEYS
    if unknown:
        raise ValueError(f"unknown fake NVML config key(s): {sorted(unknown)}")

    lines = ["# written by tests.fake_nvml.write_config"]
    lines += [f"{key} = {_scalar(key, value)}" for key, value in config.items()]
    lines += _error_lines("error.", errors)
    lines += [f"delay_ms.{fn} = {_scalar('delay_ms.' + fn, int(ms))}" for fn, ms in delays.items()]
    for index, gpu in gpu_items:
        gpu = dict(gpu)
        gpu_errors = gpu.pop("error", {})
        gpu_delays = gpu.pop("delay_ms", {})
        unknown = set(gpu) - GPU_FIELDS
        if unknown:
            raise ValueError(f"gpu {index}: unknown fake NVML field(s): {sorted(unknown)}")
        for field, value in gpu.items():
            key = f"gpu.{index}.{field}"
            if field in _PROC_FIELDS:
                text = _procs(key, value)
            elif field in _ROW_FIELDS:
                text = _rows(key, value)
            else:
                text = _scalar(key, value)
            lines.append(f"{key} = {text}")
        lines += _error_lines(f"gpu.{index}.error.", gpu_errors)
        lines += [f"gpu.{index}.delay_ms.{fn} = {_scalar(f'gpu.{index}.delay_ms.{fn}', int(ms))}"
                  for fn, ms in gpu_delays.items()]
    return "\n".join(lines) + "\n"


def write_config(path: Path | str, config: Mapping[str, Any]) -> None:
    """Atomically (re)write the fake NVML config file at ``path``.

    ``config`` is a dict of global keys (``init_error``, ``driver_version``,
    ``nvml_version``, ``cuda_driver_version``, ``device_count``) plus
    ``"gpus"`` (a list, or a dict keyed by index, of per-GPU field dicts, each
    optionally with an ``"error"`` dict of function name or ``"*"`` -> code
    and a ``"delay_ms"`` dict of function name -> ms for that GPU only),
    ``"error"`` (function -> code) and ``"delay_ms"`` (function -> ms).
    ``device_count`` defaults to the number of GPUs given. ``procs`` and
    ``graphics_procs`` take ``[(pid, bytes), ...]`` (or 4-tuples adding the
    GPU and compute instance ids). ``proc_util`` takes ``[(pid, sm, mem), ...]``,
    ``gpm_metric_errors`` ``[(metric_id, code), ...]`` and ``mig_devices``
    ``[(gi, ci, used, total[, sm, occupancy, tensor, dram]), ...]``. A string field may be ``bytes`` (a name
    that is not UTF-8). Unknown keys raise ValueError.

    The file's mtime is forced strictly past the previous one, so a process
    polling it sees every rewrite, even two within one clock tick.
    """
    path = Path(path)
    text = render_config(config)
    try:
        previous_ns = path.stat().st_mtime_ns
    except FileNotFoundError:
        previous_ns = -1

    fd, tmp_name = tempfile.mkstemp(prefix=f".{path.name}.", dir=path.parent)
    try:
        with os.fdopen(fd, "w") as f:
            f.write(text)
        # Some filesystems store coarse timestamps: grow the step until the
        # stored mtime really moved past the previous file's.
        wanted = max(time.time_ns(), previous_ns + 1)
        for step in (0, 1_000, 1_000_000, 1_000_000_000, 2_000_000_000):
            stamp = max(wanted, previous_ns + step)
            os.utime(tmp_name, ns=(stamp, stamp))
            if os.stat(tmp_name).st_mtime_ns > previous_ns:
                break
        else:
            raise OSError(f"cannot advance the mtime of {path}")
        os.replace(tmp_name, path)
    except BaseException:
        if os.path.exists(tmp_name):
            os.unlink(tmp_name)
        raise


def fake_nvml_env(lib_dir: Path | str, config_path: Path | str) -> dict[str, str]:
    """Environment variables that make a subprocess load the fake library.

    Only these variables are returned (``LD_LIBRARY_PATH`` with ``lib_dir``
    prepended to the current value, and ``FAKE_NVML_CONFIG``); merge them into
    a full environment: ``{**os.environ, **fake_nvml_env(...)}``.
    """
    lib_dir = str(Path(lib_dir).resolve())
    current = os.environ.get("LD_LIBRARY_PATH", "")
    return {
        "LD_LIBRARY_PATH": lib_dir + (os.pathsep + current if current else ""),
        CONFIG_ENV: str(Path(config_path).resolve()),
    }
