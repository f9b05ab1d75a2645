"""Run a script under ``torchrun`` (``python -m torch.distributed.run``) for tests: N CPU ranks,
gloo over loopback, in a hermetic environment (no GPU, the simulated backend, no distributed or
cluster settings from the developer's shell), and a deadline after which every rank is killed,
so a hang fails the test instead of hanging the suite.

    done = torchrun(script, tmp_path, nproc=2)   # a RankRun: returncode, output, timed_out

Two "machines" are two torchrun calls (in threads) with ``nnodes=2``, ``node_rank=0`` / ``1`` and
the same ``master_port``.
"""
from __future__ import annotations

import contextlib
import os
import socket
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import psutil

ROOT = Path(__file__).resolve().parents[1]

# Read by torch.distributed, Lightning or accelerate to find their ranks, devices or cluster: any
# of them left over from the developer's shell would change what the ranks do.
_LEAKS = ("MASTER_ADDR", "MASTER_PORT", "RANK", "LOCAL_RANK", "WORLD_SIZE", "LOCAL_WORLD_SIZE", "GROUP_RANK",
          "NODE_RANK", "CUDA_VISIBLE_DEVICES", "GPU_WIDGETS_SIMULATED_GPUS", "GPU_WIDGETS_SIMULATED_FAULTS",
          "FAKE_NVML_CONFIG")
_LEAK_PREFIXES = ("TORCHELASTIC_", "SLURM_", "OMPI_", "PMI_", "PL_", "LT_", "ACCELERATE_", "KERAS_DISTRIBUTION_")


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def rank_env(run_dir: Path, **extra: str) -> dict[str, str]:
    """The ranks' environment: this checkout's gpu_widgets, the simulated backend, run logs in
    ``run_dir``, no GPU, one thread per rank (the CI's few cores are shared), gloo on loopback."""
    env = {k: v for k, v in os.environ.items() if k not in _LEAKS and not k.startswith(_LEAK_PREFIXES)}
    env.update(PYTHONPATH=str(ROOT), GPU_WIDGETS_BACKEND="simulated", GPU_WIDGETS_RUN_DIR=str(run_dir),
               CUDA_VISIBLE_DEVICES="", OMP_NUM_THREADS="1", GLOO_SOCKET_IFNAME="lo", PYTHONWARNINGS="ignore",
               HF_HUB_OFFLINE="1")
    env.update(extra)
    return env


@dataclass
class RankRun:
    returncode: int | None  # None: killed at the deadline
    output: str  # stdout and stderr of torchrun and every rank, interleaved
    timed_out: bool


def torchrun(script: Path, run_dir: Path, *args: str, nproc: int = 2, timeout_s: float = 180,
             env: dict[str, str] | None = None, nnodes: int = 1, node_rank: int = 0,
             master_port: int | None = None) -> RankRun:
    """``script`` on ``nproc`` ranks, from its own folder. At the deadline torchrun and every process
    under it are killed: torchrun starts each rank in a session of its own, and a rank left alive
    would keep the output pipe open (and the test waiting)."""
    command = [sys.executable, "-m", "torch.distributed.run", f"--nproc_per_node={nproc}", f"--nnodes={nnodes}",
               f"--node_rank={node_rank}", "--master_addr=127.0.0.1", f"--master_port={master_port or free_port()}",
               str(script), *args]
    proc = subprocess.Popen(command, cwd=script.parent, env=env or rank_env(run_dir), stdout=subprocess.PIPE,
                            stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, text=True)
    try:
        output, _ = proc.communicate(timeout=timeout_s)
        return RankRun(proc.returncode, output, False)
    except subprocess.TimeoutExpired:
        _kill_tree(proc)
        output, _ = proc.communicate(timeout=30)
        return RankRun(None, output, True)
    finally:
        if proc.poll() is None:  # the test itself was stopped (Ctrl-C, pytest-timeout)
            _kill_tree(proc)


def _kill_tree(proc: subprocess.Popen) -> None:
    try:
        tree = psutil.Process(proc.pid).children(recursive=True)
    except psutil.Error:
        tree = []
    proc.kill()
    for child in tree:
        with contextlib.suppress(psutil.Error):
            child.kill()
