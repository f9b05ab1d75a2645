"""Reading a PyTorch memory snapshot: the pickle ``torch.cuda.memory._dump_snapshot(path)`` writes,
or the dict ``torch.cuda.memory._snapshot()`` returns.

A snapshot file is untrusted input, and loading a pickle can run code (a pickle may name any
function, ``os.system`` say, and ask for it to be called). ``read_snapshot`` uses an unpickler
whose ``find_class`` refuses every name, so the only objects it can build are the ones pickle
makes without naming anything: dict, list, tuple, str, bytes, int, float, bool, None (and sets).
A pickle that names a class or a function is refused before anything in it is called.

The format, as checked against PyTorch 2.13 (``torch/cuda/memory.py``: the ``_snapshot``
docstring and ``_dump_snapshot``, which is ``pickle.dump`` of that dict; ``torch/cuda/_memory_viz.py``;
the C++ that builds the dict, ``torch/csrc/cuda/Module.cpp`` ``_memory_snapshot``):

- ``segments``: one dict per cudaMalloc'd segment: ``device``, ``address``, ``total_size``,
  ``allocated_size``, ``stream``, ``blocks`` (``address``, ``size``, ``requested_size``,
  ``state`` "active_allocated" / "active_pending_free" / "inactive", ``frames``). This is the
  state when the snapshot was taken, i.e. at the end of the trace.
- ``device_traces``: one list per device (index = device), oldest entry first, each a dict with
  ``action`` (alloc, free_requested, free_completed, segment_alloc, segment_free, segment_map,
  segment_unmap, oom, snapshot), ``addr`` (``device_free`` instead for oom), ``size``,
  ``stream``, ``time_us`` (absent before PyTorch 2.1), ``frames``. The allocator keeps only the
  last ``max_entries`` entries, so a trace may begin after memory was already allocated.
- a frame: ``{"filename", "line", "name"}``; a list of frames is innermost first (the call that
  allocated, then its callers: ``_memory_viz`` reverses them to draw a flame graph root first).

On a machine without CUDA, ``torch.cuda.memory._snapshot()`` raises AttributeError (no
``torch._C._cuda_memorySnapshot`` in a CPU build; checked with torch 2.13+cpu), and so does
``_record_memory_history``: such a machine can read snapshots but not take them.
"""
from __future__ import annotations

import io
import os
import pickle
from pathlib import Path
from typing import Any

# A snapshot is a few KB per trace entry (frames included): 10^6 entries is about 1-2 GB on disk.
# Past 2 GiB the Python objects it becomes would not fit a laptop's memory.
MAX_FILE_BYTES = 2 << 30
# Entries per device analysed (about 40 bytes each in the analysis). A pickle can repeat one
# object by reference in 2 bytes, so the file's size alone does not bound the count.
MAX_ENTRIES = 10_000_000


class SnapshotError(ValueError):
    """A snapshot that cannot be read or is not one; the message names the file."""


class RefusedPickle(pickle.UnpicklingError):
    """The pickle asked for something beyond plain data; nothing was called."""


class PlainDataUnpickler(pickle.Unpickler):
    """Builds plain data only: every class or function a pickle names is refused."""

    def find_class(self, module: str, name: str) -> Any:
        raise RefusedPickle(
            f"it names {module}.{name}; a memory snapshot is plain data (dicts, lists, strings, "
            "numbers), so this reader refuses any pickle that names a class or a function, and "
            "nothing in it was run")

    def persistent_load(self, pid: Any) -> Any:
        raise RefusedPickle("it uses persistent ids, which a memory snapshot never does")


def load_plain(data: bytes | io.BufferedIOBase) -> Any:
    """Unpickle plain data from bytes or a binary file (see PlainDataUnpickler)."""
    stream = io.BytesIO(data) if isinstance(data, (bytes, bytearray)) else data
    return PlainDataUnpickler(stream).load()


def _describe(value: Any) -> str:
    return type(value).__name__


def check_snapshot(value: Any, where: str) -> dict[str, Any]:
    """``value`` as a snapshot dict, or SnapshotError saying what ``where`` holds instead."""
    if not isinstance(value, dict):
        raise SnapshotError(f"{where} is not a PyTorch memory snapshot: it holds a {_describe(value)}, "
                            "not the dict torch.cuda.memory._snapshot() returns")
    traces = value.get("device_traces")
    if not isinstance(traces, list) or not all(isinstance(t, list) for t in traces):
        keys = ", ".join(sorted(map(str, value))[:8]) or "none"
        raise SnapshotError(f"{where} is not a PyTorch memory snapshot: it has no 'device_traces' list "
                            f"(its keys: {keys})")
    segments = value.get("segments", [])
    if not isinstance(segments, list):
        raise SnapshotError(f"{where}: 'segments' is a {_describe(segments)}, not a list")
    longest = max(map(len, traces), default=0)
    if longest > MAX_ENTRIES:
        raise SnapshotError(f"{where} has {longest:,} trace entries on one device: more than the {MAX_ENTRIES:,} "
                            "this reader analyses (record fewer: _record_memory_history(max_entries=...))")
    if not any(traces):
        raise SnapshotError(
            f"{where} has an empty trace: no allocation was recorded. Record with "
            "torch.cuda.memory._record_memory_history() before the code, then take the snapshot")
    return value


def read_snapshot(source: Any) -> tuple[dict[str, Any], str]:
    """The snapshot dict and a name for it (the file's path, or "the snapshot dict").

    ``source``: a path (str or PathLike) to a pickle, or the dict itself. Raises SnapshotError
    (a ValueError) naming the file for anything that is not a readable snapshot."""
    if isinstance(source, dict):
        return check_snapshot(source, "the snapshot dict"), "the snapshot dict"
    if isinstance(source, (bytes, bytearray)):
        raise TypeError("pass a snapshot's path or its dict, not its bytes")
    if not isinstance(source, (str, os.PathLike)):
        raise TypeError(f"expected a snapshot's path or the dict torch.cuda.memory._snapshot() returns, "
                        f"got {_describe(source)}")
    path = Path(source)
    where = str(path)
    try:
        size = path.stat().st_size
    except OSError as exc:
        raise SnapshotError(f"{where}: cannot read it ({exc.strerror or exc})") from None
    if not path.is_file():
        raise SnapshotError(f"{where} is not a file")
    if size == 0:
        raise SnapshotError(f"{where} is empty (0 bytes): not a memory snapshot")
    if size > MAX_FILE_BYTES:
        raise SnapshotError(f"{where} is {size / (1 << 30):.1f} GiB: larger than the {MAX_FILE_BYTES >> 30} GiB "
                            "this reader loads (record fewer entries: _record_memory_history(max_entries=...))")
    try:
        with path.open("rb") as f:
            value = load_plain(f)
    except RefusedPickle as exc:
        raise SnapshotError(f"{where} was refused: {exc}") from None
    except pickle.UnpicklingError as exc:
        text = str(exc)
        if "truncated" in text:
            raise SnapshotError(f"{where} is truncated: {text} (a copy cut short, or a dump that did not finish)") from None
        raise SnapshotError(f"{where} is not a readable pickle ({text}): not a memory snapshot, or damaged") from None
    except EOFError:
        raise SnapshotError(f"{where} is truncated: the pickle ends before its end mark "
                            "(a copy cut short, or a dump that did not finish)") from None
    except MemoryError:
        raise SnapshotError(f"{where} does not fit in memory once loaded") from None
    except Exception as exc:  # noqa: BLE001 - a damaged pickle fails in many ways; all mean the same
        raise SnapshotError(f"{where} is not a readable pickle ({type(exc).__name__}: {exc})") from None
    return check_snapshot(value, where), where
