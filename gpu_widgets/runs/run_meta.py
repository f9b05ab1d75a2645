"""Reading ``run.json`` (a run's title, status, times, writer's pid, batch size, GPUs used), which is untrusted: it may be
damaged, not an object, nested thousands deep, hold a pid of 70 bits, be a FIFO. The steps are the
user's data and read without it; what cannot be read from it is left out, with a note."""
from __future__ import annotations

import math
from pathlib import Path
from typing import Any

from .file_reads import MAX_META_BYTES, RunFileError, load_json, read_small
from .run_files import shown
from .run_log import META

MAX_PID = 2**31 - 1  # pid_t is 32 bits signed; a bigger "pid" would overflow os.kill
_TYPES: dict[str, tuple[type, ...]] = {
    "title": (str,), "status": (str,), "error": (str,), "host": (str,), "batch_size": (int,), "total_steps": (int,),
    "pid": (int,), "started": (int, float), "ended": (int, float), "steps": (int,), "log_calls": (int,),
    "gpus_used": (list,), "gpu_summary": (bool,),
}
MAX_GPUS_USED = 4096  # indices in "gpus_used": a machine has a few dozen GPUs at most
UNKNOWN = "the run's title and status are unknown"


def read_meta(run_dir: Path) -> tuple[dict[str, Any], list[str]]:
    """``run.json`` of ``run_dir`` as an object holding only values of the types gpu-widgets
    writes, and notes about what was left out. No run.json: ``{}`` without a note."""
    return read_meta_file(run_dir / META)


def read_meta_file(path: Path) -> tuple[dict[str, Any], list[str]]:
    """``read_meta`` of one file: a run's ``run.json``, or the ``.meta.json`` beside a saved file."""
    name = path.name
    try:
        meta = load_json(read_small(path, MAX_META_BYTES).decode("utf-8"), name)
    except FileNotFoundError:
        return {}, []
    except RunFileError as exc:  # not a regular file, too big, or nested too deeply
        return {}, [f"{exc}; {UNKNOWN}"]
    except OSError as exc:
        return {}, [f"{name} could not be read ({exc.strerror or type(exc).__name__}); {UNKNOWN}"]
    except ValueError as exc:  # not UTF-8, not JSON
        return {}, [f"{name} could not be read ({type(exc).__name__}); {UNKNOWN}"]
    if not isinstance(meta, dict):
        return {}, [f"{name} is not a JSON object; {UNKNOWN}"]
    return meta, _checked(meta, name)


def _checked(meta: dict[str, Any], name: str = META) -> list[str]:
    notes = []
    for key, types in _TYPES.items():
        v = meta.get(key)
        if v is None:
            continue
        bad = isinstance(v, bool) != (bool in types) or not isinstance(v, types)
        if not bad and key in ("batch_size", "total_steps"):
            bad = v <= 0
        if not bad and key in ("steps", "log_calls"):
            bad = v < 0
        if not bad and key == "gpus_used":
            bad = len(v) > MAX_GPUS_USED or not all(type(i) is int and 0 <= i <= MAX_PID for i in v)
        if not bad and key == "pid":
            bad = not 0 < v <= MAX_PID
        if not bad and key in ("started", "ended"):
            try:
                bad = not math.isfinite(v)
            except OverflowError:
                bad = True
        if bad:
            notes.append(f"{name}: {key!r} is not what gpu-widgets writes ({shown(v)}); left out")
            del meta[key]
    return notes
