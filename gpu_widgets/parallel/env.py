"""The rank environment: which rank of which launch this process is.

Read from ``RANK`` and ``WORLD_SIZE`` (what torchrun, ``torch.distributed.launch`` and most
launchers set), else from an initialised default process group, but only when the program has
imported torch itself: finding out never imports it. One process (no ranks, or a world of one) is
``None``: a single-process run, recorded as it always was.
"""
from __future__ import annotations

import hashlib
import os
import socket
import sys
from collections.abc import Mapping
from dataclasses import dataclass

ENV_HOSTNAME = "GPU_WIDGETS_HOSTNAME"
# Same on every rank of one launch attempt, different between launches as far as the environment
# can tell: torchrun's run id and master, its restart count, a Slurm job.
LAUNCH_KEY_VARS = ("TORCHELASTIC_RUN_ID", "MASTER_ADDR", "MASTER_PORT", "TORCHELASTIC_RESTART_COUNT", "SLURM_JOB_ID")


@dataclass(frozen=True)
class RankEnv:
    rank: int  # global rank, 0 <= rank < world_size
    world_size: int
    local_rank: int  # among this machine's ranks
    local_world_size: int
    node_rank: int  # GROUP_RANK (torchrun), else NODE_RANK, else 0
    host: str  # $GPU_WIDGETS_HOSTNAME, else the machine's name
    launch_key: str

    @property
    def launch_hash(self) -> str:
        """Six hex digits of the launch key (the fallback launch name's tail)."""
        return hashlib.sha1(self.launch_key.encode()).hexdigest()[:6]


def host_name(env: Mapping[str, str] | None = None) -> str:
    """``$GPU_WIDGETS_HOSTNAME`` when set and not blank (tests make two "machines" on one box
    with it), else the machine's name."""
    given = (os.environ if env is None else env).get(ENV_HOSTNAME, "").strip()
    return given or socket.gethostname()


def launch_key(env: Mapping[str, str] | None = None) -> str:
    env = os.environ if env is None else env
    return "|".join(f"{name}={env.get(name, '')}" for name in LAUNCH_KEY_VARS)


def rank_env(env: Mapping[str, str] | None = None) -> RankEnv | None:
    """This process's rank, or None for a single-process run. ``RANK`` and ``WORLD_SIZE`` that
    are set but not sound raise a ValueError naming the variable."""
    env = os.environ if env is None else env
    rank_text, world_text = env.get("RANK", "").strip(), env.get("WORLD_SIZE", "").strip()
    if rank_text and world_text:
        world = _int(env, "WORLD_SIZE", 1)
        rank = _int(env, "RANK", 0)
        if rank >= world:
            raise ValueError(f"RANK={rank} is not below WORLD_SIZE={world}: gpu-widgets reads them (as torchrun "
                             "sets them) to record each rank of a parallel run")
    else:
        # Lightning's own launcher sets WORLD_SIZE alone and passes the rank to init_process_group.
        group = _process_group()
        if group is None:
            return None
        rank, world = group
    if world == 1:
        return None
    local_rank = _int(env, "LOCAL_RANK", 0) if env.get("LOCAL_RANK", "").strip() else rank
    local_world = _int(env, "LOCAL_WORLD_SIZE", 1) if env.get("LOCAL_WORLD_SIZE", "").strip() else world
    node_var = next((k for k in ("GROUP_RANK", "NODE_RANK") if env.get(k, "").strip()), None)
    node_rank = _int(env, node_var, 0) if node_var else 0
    return RankEnv(rank, world, local_rank, local_world, node_rank, host_name(env), launch_key(env))


def _int(env: Mapping[str, str], name: str, low: int) -> int:
    text = env.get(name, "").strip()
    try:
        value = int(text)
    except ValueError:
        raise ValueError(f"{name}={text!r} is not a whole number: gpu-widgets reads RANK, WORLD_SIZE and LOCAL_RANK "
                         "(as torchrun sets them) to record each rank of a parallel run") from None
    if value < low:
        raise ValueError(f"{name}={value} must be at least {low}")
    return value


def _process_group() -> tuple[int, int] | None:
    """(rank, world size) of the default process group, when this program imported torch and
    initialised one."""
    dist = sys.modules.get("torch.distributed")
    try:
        if dist is None or not (dist.is_available() and dist.is_initialized()):
            return None
        return int(dist.get_rank()), int(dist.get_world_size())
    except Exception:  # a half-torn-down group: tells nothing
        return None
