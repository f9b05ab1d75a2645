"""Shared pieces of the benchmark suite: the fake driver every contender reads, the peers'
virtual environment, worker processes, statistics and the record of the machine.

Nothing here imports gpu_widgets or a contender: workers run in their own processes (a
contender's import-time side effects, such as gpustat patching pynvml or
jupyterlab-nvdashboard initialising NVML on import, stay in its own process).
"""
from __future__ import annotations

import contextlib
import datetime as _dt
import json
import math
import os
import platform
import random
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
BENCH_DIR = REPO / "benchmarks"
# The contenders live here, never in the project's .venv (so they cannot leak into `make lab`).
CACHE_DIR = BENCH_DIR / ".cache"  # git-ignored: the contenders' venv and the results of each run
PEERS_VENV = Path(os.environ.get("GPU_WIDGETS_BENCH_PEERS_VENV", CACHE_DIR / "venv-peers"))
RESULTS_DIR = CACHE_DIR / "results"

N_GPUS = 8
PROCS_PER_GPU = 8
GIB = 1 << 30
PCIE_DELAY_MS = 20  # the real driver blocks ~20 ms in nvmlDeviceGetPcieThroughput


def server_code(env: Mapping[str, str], code: str | None) -> dict[str, str]:
    """``env`` for a server that imports gpu_widgets from the checkout ``code`` (a before/after A/B)
    and the benchmarks package (the probe, ``crowd()``) from this one; ``env`` itself without it."""
    out = dict(env)
    paths = [str(REPO), env.get("PYTHONPATH")]
    if code:
        shim = Path(tempfile.mkdtemp(prefix="gw-code-"))
        (shim / "gpu_widgets").symlink_to(Path(code).resolve() / "gpu_widgets")
        paths.insert(0, str(shim))
    out["PYTHONPATH"] = os.pathsep.join(filter(None, paths))
    return out


# -- statistics ------------------------------------------------------------------------------------
def percentile(values: Sequence[float], q: float) -> float | None:
    """Linear-interpolated percentile (q in 0..100); None for no values."""
    if not values:
        return None
    xs = sorted(values)
    if len(xs) == 1:
        return float(xs[0])
    pos = (len(xs) - 1) * q / 100.0
    lo = math.floor(pos)
    hi = min(lo + 1, len(xs) - 1)
    return float(xs[lo] + (xs[hi] - xs[lo]) * (pos - lo))


def median(values: Sequence[float]) -> float | None:
    return percentile(values, 50)


def summary(values: Sequence[float]) -> dict[str, Any]:
    """n, median, p25/p75 (the spread we quote), min, max."""
    return {
        "n": len(values),
        "median": median(values),
        "p25": percentile(values, 25),
        "p75": percentile(values, 75),
        "min": min(values) if values else None,
        "max": max(values) if values else None,
    }


def interleaved(items: Sequence[Any], rounds: int, seed: int = 0) -> Iterator[tuple[int, Any]]:
    """(round, item) for every item in every round, each round in a fresh random order, so slow
    drifts of the machine (thermal, other load) hit every contender alike."""
    rng = random.Random(seed)
    for r in range(rounds):
        order = list(items)
        rng.shuffle(order)
        for item in order:
            yield r, item


# -- the machine and the versions ---------------------------------------------------------------------
def cpu_model() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def machine_info() -> dict[str, Any]:
    try:
        usable = len(os.sched_getaffinity(0))
    except AttributeError:
        usable = os.cpu_count()
    mem_gib = None
    with contextlib.suppress(OSError, ValueError, IndexError):
        for line in Path("/proc/meminfo").read_text().splitlines():
            if line.startswith("MemTotal:"):
                mem_gib = round(int(line.split()[1]) / 2**20, 1)
    commit = None
    with contextlib.suppress(OSError, subprocess.SubprocessError):
        out = subprocess.run(["git", "-C", str(REPO), "rev-parse", "--short", "HEAD"], capture_output=True,
                             text=True, timeout=10)
        if out.returncode == 0:
            dirty = subprocess.run(["git", "-C", str(REPO), "status", "--porcelain", "--untracked-files=no"],
                                   capture_output=True, text=True, timeout=10).stdout.strip()
            commit = out.stdout.strip() + ("+uncommitted changes" if dirty else "")
    return {
        "date_utc": _dt.datetime.now(_dt.timezone.utc).strftime("%Y-%m-%d %H:%M UTC"),
        "cpu": cpu_model(),
        "cores": os.cpu_count(),
        "usable_cores": usable,
        "memory_gib": mem_gib,
        "os": f"{platform.system()} {platform.release()}",
        "python": platform.python_version(),
        "python_executable": sys.executable,
        "git_commit": commit,
        "gpu": "none: NVML is the fake libnvidia-ml.so.1 from tests/fake_nvml for every contender",
        "load_average_at_start": os.getloadavg(),
    }


VERSION_PACKAGES = (
    "gpu-widgets", "nvidia-ml-py", "psutil", "jupyter_server", "tornado", "ipywidgets", "bqplot", "numpy",
    "torch", "nvitop", "gpustat", "jupyterlab-nvdashboard", "livelossplot", "tqdm", "matplotlib",
)

_VERSIONS_SCRIPT = """
import json, sys
from importlib import metadata
out = {}
for name in sys.argv[1:]:
    try:
        out[name] = metadata.version(name)
    except metadata.PackageNotFoundError:
        out[name] = None
print(json.dumps(out))
"""


def package_versions(python: str | Path) -> dict[str, str | None]:
    """Installed versions in the environment of ``python`` (gpu-widgets: this checkout's)."""
    out = subprocess.run([str(python), "-c", _VERSIONS_SCRIPT, *VERSION_PACKAGES], capture_output=True, text=True,
                         timeout=60)
    versions = json.loads(out.stdout) if out.returncode == 0 else {}
    sys.path.insert(0, str(REPO))
    try:
        from gpu_widgets import __version__
        versions["gpu-widgets"] = f"{__version__} (this checkout)"
    finally:
        sys.path.pop(0)
    return versions


# -- the peers' environment ------------------------------------------------------------------------------
def peers_python() -> tuple[Path | None, str]:
    """The peers venv's python, or None with the reason it cannot be used."""
    py = PEERS_VENV / "bin" / "python"
    if not py.exists():
        return None, (f"no peers environment at {PEERS_VENV}: run `make bench` or "
                      "`python -m benchmarks.run --install-peers` to create it")
    return py, ""


def peer_available(python: Path | None, module: str) -> tuple[bool, str]:
    if python is None:
        return False, peers_python()[1]
    out = subprocess.run([str(python), "-c", f"import importlib.util, sys; "
                          f"sys.exit(0 if importlib.util.find_spec({module!r}) else 1)"],
                         capture_output=True, text=True, timeout=60)
    if out.returncode != 0:
        return False, f"`{module}` is not installed in {PEERS_VENV} (re-run `python -m benchmarks.run --install-peers`)"
    return True, ""


def bench_extra() -> list[str]:
    """The `bench` extra of pyproject.toml: the contenders and what the suite needs beside them."""
    import tomllib

    data = tomllib.loads((REPO / "pyproject.toml").read_text())
    project = data["project"]
    return list(project.get("optional-dependencies", {}).get("bench", []))


def project_dependencies() -> list[str]:
    import tomllib

    return list(tomllib.loads((REPO / "pyproject.toml").read_text())["project"]["dependencies"])


def install_peers(torch_spec: str = "torch==2.13.0") -> Path:
    """Create the peers venv: the CPU torch wheel first (so nothing pulls a CUDA build), then the
    project's own dependencies and the `bench` extra. gpu-widgets itself is NOT installed there:
    workers import it from this checkout (PYTHONPATH), so no server-extension config is enabled
    in that environment except the ones each benchmark asks for on its command line."""
    py = PEERS_VENV / "bin" / "python"
    if not py.exists():
        subprocess.run([sys.executable, "-m", "venv", str(PEERS_VENV)], check=True)
        subprocess.run([str(py), "-m", "pip", "install", "-q", "--upgrade", "pip"], check=True)
    if torch_spec:
        if subprocess.run([str(py), "-m", "pip", "install", "-q", torch_spec]).returncode != 0:
            print(f"WARNING: could not install {torch_spec}: the training benchmark will skip", file=sys.stderr)
    subprocess.run([str(py), "-m", "pip", "install", "-q", *project_dependencies(), *bench_extra()], check=True)
    return py


# -- the fake driver -------------------------------------------------------------------------------------------
def _fake_nvml():
    sys.path.insert(0, str(REPO))
    try:
        from tests import fake_nvml
    finally:
        sys.path.pop(0)
    return fake_nvml


class FakeDriver:
    """8 busy GPUs, each with 8 live processes, served by the fake libnvidia-ml.so.1.

    The processes are real (``sleep`` children of this process), so every contender's psutil
    look-ups succeed as on a real machine. Same file, same values for every contender.
    """

    def __init__(self, n_gpus: int = N_GPUS, procs_per_gpu: int = PROCS_PER_GPU,
                 pcie_delay_ms: int = 0) -> None:
        self.n_gpus, self.procs_per_gpu, self.pcie_delay_ms = n_gpus, procs_per_gpu, pcie_delay_ms
        self._tmp = Path(tempfile.mkdtemp(prefix="gw-bench-"))
        self.config_path = self._tmp / "fake-nvml.conf"
        self.lib_dir = _fake_nvml().build_fake_nvml()
        self._sleepers: list[subprocess.Popen] = []

    @property
    def tmp(self) -> Path:
        return self._tmp

    def config(self) -> dict[str, Any]:
        pids = [p.pid for p in self._sleepers]
        gpus = []
        for i in range(self.n_gpus):
            mine = pids[i * self.procs_per_gpu:(i + 1) * self.procs_per_gpu]
            gpus.append({
                "name": "NVIDIA H100 80GB HBM3",
                "util_gpu": 90 + i % 7, "util_memory": 40 + i, "temperature": 60 + i,
                "fan": 0, "power_mw": 520_000 + 3_000 * i, "power_limit_mw": 700_000,
                "energy_mj": 9_000_000_000 + i, "clock_graphics": 1980, "clock_sm": 1980, "clock_mem": 2619,
                "pstate": 0, "clocks_event_reasons": 0x4 if i == 3 else 0x0,
                "memory_used": 8 * 7 * GIB, "memory_reserved": GIB // 2,
                "pcie_tx_kbps": 3_000_000 + i, "pcie_rx_kbps": 1_500_000 + i,
                "procs": [(pid, 7 * GIB) for pid in mine],
                # GPM and per-process use, read only when the sampler is asked for them.
                "gpm_sm_util": 80 + i, "gpm_sm_occupancy": 40, "gpm_tensor_util": 60, "gpm_dram_util": 35,
                "proc_util": [(pid, 10 + k, 5) for k, pid in enumerate(mine)],
            })
        delays = {"nvmlDeviceGetPcieThroughput": self.pcie_delay_ms} if self.pcie_delay_ms else {}
        return {"gpus": gpus, "delay_ms": delays}

    def __enter__(self) -> "FakeDriver":
        for _ in range(self.n_gpus * self.procs_per_gpu):
            self._sleepers.append(subprocess.Popen(["sleep", "86400"], stdin=subprocess.DEVNULL))
        _fake_nvml().write_config(self.config_path, self.config())
        return self

    def __exit__(self, *exc: object) -> None:
        for p in self._sleepers:
            with contextlib.suppress(OSError):
                p.kill()
        for p in self._sleepers:
            with contextlib.suppress(Exception):
                p.wait(timeout=5)
        self._sleepers = []
        shutil.rmtree(self._tmp, ignore_errors=True)

    def env(self, base: Mapping[str, str] | None = None, **extra: str) -> dict[str, str]:
        env = dict(os.environ if base is None else base)
        for var in ("GPU_WIDGETS_BACKEND", "GPU_WIDGETS_SIMULATED_GPUS", "CUDA_VISIBLE_DEVICES"):
            env.pop(var, None)
        env.update(_fake_nvml().fake_nvml_env(self.lib_dir, self.config_path))
        env["PYTHONPATH"] = str(REPO) + (os.pathsep + env["PYTHONPATH"] if env.get("PYTHONPATH") else "")
        env.update(extra)
        return env


def with_bench_package(env: Mapping[str, str], into: Path) -> dict[str, str]:
    """``env`` for a process that imports this checkout's ``benchmarks`` package (a Jupyter server
    loading ``benchmarks.lag_probe``) whatever gpu_widgets it runs: a regular install does not put
    the checkout on the path, only an editable one does. ``into`` gets a directory holding only a
    link to the package, last on PYTHONPATH, so the environment's own gpu_widgets stays the one used."""
    only = into / "bench-package"
    only.mkdir(parents=True, exist_ok=True)
    link = only / "benchmarks"
    if not link.exists():
        link.symlink_to(BENCH_DIR, target_is_directory=True)
    out = dict(env)
    out["PYTHONPATH"] = os.pathsep.join(filter(None, [out.get("PYTHONPATH"), str(only)]))
    return out


# -- worker processes (JSON lines over stdin/stdout) ---------------------------------------------------------
class Worker:
    """A long-lived benchmark process: one request per line in, one JSON answer per line out."""

    def __init__(self, python: str | Path, module: str, args: Sequence[str], env: Mapping[str, str],
                 timeout: float = 300.0) -> None:
        self.timeout = timeout
        self.stderr = tempfile.TemporaryFile(mode="w+")
        self.proc = subprocess.Popen(
            [str(python), "-m", module, *args], cwd=str(REPO), env=dict(env), text=True,
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=self.stderr, bufsize=1,
        )

    def call(self, **request: Any) -> dict[str, Any]:
        assert self.proc.stdin is not None and self.proc.stdout is not None
        try:
            self.proc.stdin.write(json.dumps(request) + "\n")
            self.proc.stdin.flush()
        except BrokenPipeError:
            raise WorkerError(self._died()) from None
        line = self.proc.stdout.readline()
        if not line:
            raise WorkerError(self._died())
        answer = json.loads(line)
        if "error" in answer:
            raise WorkerError(answer["error"])
        return answer

    def _died(self) -> str:
        with contextlib.suppress(subprocess.TimeoutExpired):
            self.proc.wait(timeout=5)
        self.stderr.seek(0)
        tail = self.stderr.read()[-2000:]
        return f"worker exited ({self.proc.returncode}): {tail.strip()}"

    def close(self) -> None:
        with contextlib.suppress(Exception):
            if self.proc.poll() is None:
                self.proc.stdin.close()  # type: ignore[union-attr]
                self.proc.wait(timeout=10)
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait(timeout=10)
        self.stderr.close()


class WorkerError(RuntimeError):
    pass


def serve(handlers: Mapping[str, Any]) -> None:
    """The worker side of Worker: ``{"op": name, ...}`` -> ``handlers[name](**rest)``."""
    out = sys.stdout
    sys.stdout = sys.stderr  # a contender that prints must not corrupt the protocol
    for line in sys.stdin:
        request = json.loads(line)
        op = request.pop("op")
        try:
            answer = handlers[op](**request)
        except Exception as exc:  # reported to the orchestrator, which says which contender failed
            import traceback

            answer = {"error": f"{type(exc).__name__}: {exc}\n{traceback.format_exc()[-1500:]}"}
        out.write(json.dumps(answer) + "\n")
        out.flush()


def rss_bytes(pid: int | None = None) -> int:
    """Resident memory of a process (this one by default), from /proc."""
    path = f"/proc/{pid or os.getpid()}/status"
    for line in Path(path).read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) * 1024
    return 0


def fmt(value: float | None, digits: int = 1, unit: str = "") -> str:
    if value is None:
        return "-"
    return f"{value:,.{digits}f}{unit}"


def now() -> float:
    return time.perf_counter()
