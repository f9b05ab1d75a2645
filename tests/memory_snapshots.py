"""Synthetic memory snapshots in PyTorch's format (``torch.cuda.memory._snapshot()``'s dict; see
gpu_widgets/memory/snapshot_file.py for the keys checked against PyTorch 2.13). A CPU build of
torch cannot record one (no ``_cuda_memorySnapshot``), so tests build them here: frames innermost
first, ``time_us`` per entry, ``free_requested`` then ``free_completed``, segments at the end.
"""
from __future__ import annotations

import pickle
from pathlib import Path
from typing import Any

GIB = 1 << 30
MIB = 1 << 20
TORCH = "/usr/lib/python3.11/site-packages/torch"


def frame(filename: str, line: int, name: str) -> dict[str, Any]:
    return {"filename": filename, "line": line, "name": name}


def torch_frames() -> list[dict[str, Any]]:
    """What sits between user code and the allocator: PyTorch's own Python frames."""
    return [frame(f"{TORCH}/nn/modules/linear.py", 125, "forward"),
            frame(f"{TORCH}/nn/modules/module.py", 1750, "_call_impl")]


class SnapshotBuilder:
    """Appends trace entries to one device; ``snapshot()`` makes the dict (segments at the end)."""

    def __init__(self, devices: int = 1) -> None:
        self.traces: list[list[dict[str, Any]]] = [[] for _ in range(devices)]
        self.live: list[dict[int, tuple[int, list]]] = [{} for _ in range(devices)]
        self.time_us = 1_700_000_000_000_000
        self.next_addr = 0x7F0000000000
        self.pre_blocks: list[tuple[int, int, int]] = []  # (device, addr, size) alive before recording

    def _entry(self, device: int, action: str, addr: int, size: int, frames: list) -> None:
        self.time_us += 1000
        self.traces[device].append({"action": action, "addr": addr, "size": size, "stream": 0,
                                    "time_us": self.time_us, "frames": frames,
                                    "compile_context": "", "user_metadata": ""})

    def alloc(self, size: int, filename: str, line: int, name: str = "train_step", *, device: int = 0,
              inside_torch: bool = True) -> int:
        """An allocation made at filename:line (under PyTorch's frames when ``inside_torch``)."""
        addr = self.next_addr
        self.next_addr += max(size, 512)
        user = [frame(filename, line, name), frame("/home/me/train.py", 200, "<module>")]
        frames = (torch_frames() if inside_torch else []) + user
        self._entry(device, "alloc", addr, size, frames)
        self.live[device][addr] = (size, frames)
        return addr

    def free(self, addr: int, *, device: int = 0) -> None:
        size, frames = self.live[device].pop(addr)
        self._entry(device, "free_requested", addr, size, frames)
        self._entry(device, "free_completed", addr, size, frames)

    def free_unknown(self, addr: int, size: int, *, device: int = 0) -> None:
        """A free of memory allocated before the recording began."""
        self._entry(device, "free_requested", addr, size, [])
        self._entry(device, "free_completed", addr, size, [])

    def allocated_before(self, size: int, *, device: int = 0) -> int:
        """A block allocated before the recording that is still allocated at the end."""
        addr = self.next_addr
        self.next_addr += size
        self.pre_blocks.append((device, addr, size))
        return addr

    def oom(self, size: int, device_free: int, *, device: int = 0) -> None:
        self.time_us += 1000
        self.traces[device].append({"action": "oom", "device_free": device_free, "size": size, "stream": 0,
                                    "time_us": self.time_us, "frames": []})

    def snapshot(self) -> dict[str, Any]:
        segments = []
        for device, live in enumerate(self.live):
            blocks = [(addr, size, frames) for addr, (size, frames) in live.items()]
            blocks += [(addr, size, []) for d, addr, size in self.pre_blocks if d == device]
            for addr, size, frames in sorted(blocks):
                segments.append({"device": device, "address": addr, "total_size": size, "allocated_size": size,
                                 "active_size": size, "requested_size": size, "stream": 0,
                                 "segment_type": "large", "segment_pool_id": (0, 0), "is_expandable": False,
                                 "frames": [], "blocks": [{"address": addr, "size": size, "requested_size": size,
                                                           "state": "active_allocated", "frames": frames}]})
        return {"segments": segments, "device_traces": self.traces,
                "allocator_settings": {"PYTORCH_CUDA_ALLOC_CONF": "", "max_split_size": -1},
                "external_annotations": []}


def three_sites() -> dict[str, Any]:
    """1, 2 and 4 GiB alive at the peak (7 GiB) from three sites, some memory freed before it,
    and everything freed after it."""
    b = SnapshotBuilder()
    warm = b.alloc(3 * GIB, "/home/me/model.py", 10, "warmup")
    b.free(warm)  # freed before the peak: not at the peak
    small = b.alloc(1 * GIB, "/home/me/model.py", 41, "embed")
    mid = b.alloc(2 * GIB, "/home/me/model.py", 57, "attention")
    big = [b.alloc(2 * GIB, "/home/me/loss.py", 12, "logits") for _ in range(2)]  # 4 GiB from one site
    for addr in (small, mid, *big):
        b.free(addr)
    return b.snapshot()


def write(snapshot: Any, path: Path) -> Path:
    path.write_bytes(pickle.dumps(snapshot))  # as _dump_snapshot writes it: pickle.dump(s, f)
    return path


def large(entries: int) -> dict[str, Any]:
    """About ``entries`` trace entries: allocations from 50 sites in waves, frames shared per site
    (as PyTorch's symbolised frames are)."""
    b = SnapshotBuilder()
    site_frames = [torch_frames() + [frame(f"/home/me/layer{k}.py", 10 + k, f"block{k}")] for k in range(50)]
    trace = b.traces[0]
    live: list[tuple[int, int, list]] = []
    t = b.time_us
    addr = b.next_addr
    i = 0
    while len(trace) < entries:
        k = i % 50
        size = (k + 1) * MIB
        t += 10
        trace.append({"action": "alloc", "addr": addr, "size": size, "stream": 0, "time_us": t,
                      "frames": site_frames[k]})
        live.append((addr, size, site_frames[k]))
        addr += size
        shrinking = (i // 3000) % 2 == 1  # waves: memory grows for 3000 allocations, then falls
        for _ in range(2 if shrinking and len(live) > 2 else 1 if len(live) > 2500 else 0):
            old, old_size, frames = live.pop(0)
            for action in ("free_requested", "free_completed"):
                t += 10
                trace.append({"action": action, "addr": old, "size": old_size, "stream": 0, "time_us": t,
                              "frames": frames})
        i += 1
    return {"segments": [], "device_traces": [trace]}
