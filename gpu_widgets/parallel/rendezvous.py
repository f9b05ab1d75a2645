"""Agreeing on the launch's run directory: every rank of one launch writes into the same
``<root>/<launch>/``, each in its own ``rank-<r>/`` (runs/launch_dir.py).

Once per rank, when its run starts (on the monitor's thread, never the loop's), and with one store
operation: rank 0 names the launch as runs are named, makes it, and publishes the name in the
launch's key-value store; the other ranks read it there. The store is torchrun's agent store
(``TORCHELASTIC_USE_AGENT_STORE``: there before ``init_process_group``, also across machines),
else the default process group's. Without a store (another launcher, no group yet, rank 0 silent
for STORE_TIMEOUT_S) the name comes from the launch's environment (``RankEnv.launch_key``), which
every rank of one launch shares. The root must be shared between machines (one machine, or a
shared filesystem); a rank that does not find rank 0's directory makes it and says so.

A launch started by ``gpu_widgets.launch`` needs none of this: the launcher made the directory
before starting torchrun and names it in ``$GPU_WIDGETS_LAUNCH_DIR`` (the first run of each rank,
in the first attempt, records there); rank 0 still names it in torchrun's store, for ranks that
another machine's plain torchrun started.
"""
from __future__ import annotations

import datetime
import hashlib
import os
import re
import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ..runs.launch_dir import rank_dir, write_launch_meta
from ..runs.run_log import run_name, slug
from .env import RankEnv

STORE_TIMEOUT_S = 60.0  # how long a rank waits for rank 0's name (tests lower it)
KEY_PREFIX = "gpu_widgets/launch/"
VIA_AGENT = "launch directory from the torchrun store"
VIA_GROUP = "launch directory from the process group's store"
VIA_ENV = "launch directory from the launch's environment (no store)"
VIA_LAUNCHER = "launch directory from gpu_widgets.launch"
LAUNCH_DIR_ENV = "GPU_WIDGETS_LAUNCH_DIR"  # set by gpu_widgets.launch (monitor/launcher.py) for every rank
_NAME = re.compile(r"\d{8}(-\d{6})?-[a-z0-9-]*-[0-9a-f]{6}\Z")  # as run_log names runs; nothing else is joined to the root
_ATTEMPTS = 100


@dataclass
class LaunchPlace:
    launch: Path  # <root>/<launch>
    rank_path: Path  # <launch>/rank-<r>: this rank's run directory (not made here)
    via: str  # VIA_AGENT, VIA_GROUP or VIA_ENV
    notes: list[str] = field(default_factory=list)

    @property
    def name(self) -> str:
        return self.launch.name


def store_key(env: Mapping[str, str], index: int = 0) -> str:
    """The store key of this process's ``index``-th run (0 for the first) in this launch attempt:
    each restart of an elastic launch, and each further run of its ranks, gets a name of its own."""
    restart = env.get("TORCHELASTIC_RESTART_COUNT", "").strip() or "0"
    return f"{KEY_PREFIX}{restart}" + (f"/{index}" if index else "")


def env_name(title: str | None, ranks: RankEnv, index: int = 0, attempt: int = 0) -> str:
    """The launch's name when no store is reachable: the same on every rank whose clock shows the
    same day and whose environment the same launch."""
    key = ranks.launch_key + (f"|run={index}" if index else "") + (f"|attempt={attempt}" if attempt else "")
    return f"{time.strftime('%Y%m%d')}-{slug(title)}-{hashlib.sha1(key.encode()).hexdigest()[:6]}"


def agree(root: Path, title: str | None, ranks: RankEnv, launch_meta: dict[str, Any], *, index: int = 0,
          timeout_s: float | None = None, env: Mapping[str, str] | None = None) -> LaunchPlace:
    """This rank's place in its launch. Rank 0 makes the launch directory and writes
    ``launch_meta`` as its run.json; every rank gets the path of its rank directory to make."""
    env = os.environ if env is None else env
    timeout_s = STORE_TIMEOUT_S if timeout_s is None else timeout_s
    root = Path(root)
    notes: list[str] = []
    given = _launcher_dir(env, ranks, index, notes)
    key = store_key(env, index)
    if given is not None:  # launch directory from gpu_widgets.launch: made before any rank started
        if ranks.rank == 0:
            write_launch_meta(given, launch_meta)
            _publish_given(given, root, key, env, timeout_s, notes)
        return LaunchPlace(given, rank_dir(given, ranks.rank), VIA_LAUNCHER, [VIA_LAUNCHER, *notes])
    store, via = _store(env, timeout_s, notes)
    name = None
    if ranks.rank == 0:
        if store is not None:
            name = run_name(title)
            (root / name).mkdir(parents=True)
            write_launch_meta(root / name, launch_meta)
            try:
                store.set(key, name)
            except Exception as exc:  # the others fall back to the environment's name after their wait
                notes.append(f"could not publish the launch directory ({type(exc).__name__}: {exc}); "
                             "the other ranks may write elsewhere")
    elif store is not None:
        name = _published(store, key, timeout_s, via, notes)
    if name is None:
        via = VIA_ENV
        name = _free_env_name(root, title, ranks, index)
        if ranks.rank == 0:
            (root / name).mkdir(parents=True, exist_ok=True)
            write_launch_meta(root / name, launch_meta)
    launch = root / name
    if not launch.is_dir():
        if via != VIA_ENV:  # rank 0 made it before publishing: this machine sees another root
            notes.append(f"{launch} was not there: the ranks' run root is not shared (this rank writes on its "
                         "own machine; a shared filesystem puts every rank in one directory)")
        launch.mkdir(parents=True, exist_ok=True)
    return LaunchPlace(launch, rank_dir(launch, ranks.rank), via, [via, *notes])


def _launcher_dir(env: Mapping[str, str], ranks: RankEnv, index: int, notes: list[str]) -> Path | None:
    """The directory ``gpu_widgets.launch`` made for this launch, when it holds this run: the
    first run of each rank in the first attempt (a later run, or an elastic restart, would
    overwrite it: those are agreed on as any launch's, with a note)."""
    raw = env.get(LAUNCH_DIR_ENV, "").strip()
    if not raw:
        return None
    path = Path(raw)
    restart = env.get("TORCHELASTIC_RESTART_COUNT", "").strip() or "0"
    if not path.is_absolute() or not path.is_dir():
        notes.append(f"${LAUNCH_DIR_ENV} is {raw[:200]!r}, not an existing absolute directory: ignored")
        return None
    if index or restart != "0" or rank_dir(path, ranks.rank).exists():
        notes.append(f"{path} holds this launch's first run; this run (restart {restart}, run {index + 1} of "
                     "this process) gets a launch directory of its own")
        return None
    return path


def _publish_given(given: Path, root: Path, key: str, env: Mapping[str, str], timeout_s: float,
                   notes: list[str]) -> None:
    """Rank 0 also names the launcher's directory in torchrun's store, for ranks started on other
    machines without gpu_widgets.launch (``--nnodes`` > 1): they find it as any launch's."""
    if env.get("TORCHELASTIC_USE_AGENT_STORE") != "True" or not _NAME.match(given.name):
        return
    if given.parent != root.resolve():  # the others join the name to their own root
        return
    store, _ = _store(env, timeout_s, notes)
    if store is None:
        return
    try:
        store.set(key, given.name)
    except Exception as exc:
        notes.append(f"could not publish the launch directory ({type(exc).__name__}: {exc}); ranks on other "
                     "machines may write elsewhere")


def _free_env_name(root: Path, title: str | None, ranks: RankEnv, index: int) -> str:
    """The environment's name, skipping those an earlier launch with the same environment used
    (its rank directory is there): every rank of this launch skips the same ones."""
    for attempt in range(_ATTEMPTS):
        name = env_name(title, ranks, index, attempt)
        if not rank_dir(root / name, ranks.rank).exists():
            return name
    raise RuntimeError(f"{_ATTEMPTS} launch directories named from this environment exist already under {root}")


def _store(env: Mapping[str, str], timeout_s: float, notes: list[str]) -> tuple[Any, str]:
    """torchrun's agent store, else the default group's, else None."""
    try:
        import torch.distributed as dist  # here only: a single-process run never imports torch for this
    except ImportError:
        return None, VIA_ENV
    addr, port = env.get("MASTER_ADDR", "").strip(), env.get("MASTER_PORT", "").strip()
    if env.get("TORCHELASTIC_USE_AGENT_STORE") == "True" and addr and port:
        try:
            return dist.TCPStore(addr, int(port), is_master=False,
                                 timeout=datetime.timedelta(seconds=timeout_s)), VIA_AGENT
        except Exception as exc:
            notes.append(f"torchrun's store at {addr}:{port} did not answer ({type(exc).__name__}: {exc})")
    try:
        if dist.is_available() and dist.is_initialized():
            return dist.distributed_c10d._get_default_store(), VIA_GROUP
    except Exception as exc:
        notes.append(f"the process group's store is not reachable ({type(exc).__name__}: {exc})")
    return None, VIA_ENV


def _published(store: Any, key: str, timeout_s: float, via: str, notes: list[str]) -> str | None:
    """The name rank 0 published, or None (with a note) after ``timeout_s``."""
    try:
        if via == VIA_GROUP:  # the group's store: its own timeout (the group's, 30 min) left as it is
            store.wait([key], datetime.timedelta(seconds=timeout_s))
        raw = store.get(key)
    except Exception as exc:
        notes.append(f"rank 0 did not publish the launch directory within {timeout_s:g} s "
                     f"({type(exc).__name__}); named from the environment instead")
        return None
    name = raw.decode("utf-8", "replace") if isinstance(raw, bytes) else str(raw)
    if not _NAME.match(name):
        notes.append(f"the store holds {name[:80]!r} for {key}, not a launch directory's name; named from the "
                     "environment instead")
        return None
    return name
