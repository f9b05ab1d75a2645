"""The memory figures of this server's own cgroup (cgroup v2): ``memory.events`` ``oom_kill``,
``memory.max`` and ``memory.current``.

The cgroup is the ``0::<path>`` line of /proc/self/cgroup, under ``root`` (c.GpuWidgets.cgroup_root).
When that path does not exist under ``root`` (a fake tree in tests, a container that mounts its own
cgroup at the root) ``root`` itself is read. A file that cannot be read leaves its figure out, with
the reason; nothing here raises.
"""
from __future__ import annotations

from pathlib import Path
from typing import Any


def own_cgroup_dir(root: str, proc_file: str = "/proc/self/cgroup") -> Path:
    base = Path(root)
    try:
        for line in Path(proc_file).read_text().splitlines():
            if line.startswith("0::"):
                candidate = base / line[3:].strip().lstrip("/")
                if candidate.is_dir():
                    return candidate
    except OSError:
        pass
    return base


def read_memory(root: str) -> dict[str, Any]:
    """``{"dir", "oom_kill", "memory_max_bytes", "memory_current_bytes", "unavailable": {field: why}}``;
    ``memory_max_bytes`` is None for "max" (no limit). Reads a few small files: cheap, but callers
    run it in a worker anyway (sysfs may be slow on a loaded host)."""
    where = own_cgroup_dir(root)
    out: dict[str, Any] = {"dir": str(where), "oom_kill": None, "memory_max_bytes": None,
                           "memory_current_bytes": None, "unavailable": {}}
    try:
        for line in (where / "memory.events").read_text().splitlines():
            key, _, value = line.partition(" ")
            if key == "oom_kill":
                out["oom_kill"] = int(value)
        if out["oom_kill"] is None:
            out["unavailable"]["oom_kill"] = f"{where / 'memory.events'} has no oom_kill line"
    except (OSError, ValueError) as exc:
        out["unavailable"]["oom_kill"] = f"cannot read {where / 'memory.events'}: {exc}"
    for name, field in (("memory.max", "memory_max_bytes"), ("memory.current", "memory_current_bytes")):
        try:
            text = (where / name).read_text().strip()
            out[field] = None if text == "max" else int(text)
            if text == "max":
                out["unavailable"][field] = "no memory limit (memory.max is max)"
        except (OSError, ValueError) as exc:
            out["unavailable"][field] = f"cannot read {where / name}: {exc}"
    return out
