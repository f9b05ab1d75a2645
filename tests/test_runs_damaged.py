"""Run directories are untrusted: damaged or hostile ones (a run.json that is a list, nested 100,000
deep, a 70-bit pid; FIFOs; a link to /dev/zero; a line over the limit; a directory without read
permission; escape sequences in a title) are named, never crash, hang or fill memory, and never
stop the other runs from being listed, loaded or followed.

Everything here goes through real files, FIFOs (os.mkfifo), symlinks and processes. The tests run
as root, where chmod 000 stops nothing: the unreadable case runs its reader in a child process
that has dropped CAP_DAC_OVERRIDE and CAP_DAC_READ_SEARCH from its capability bounding set before
exec, so the kernel enforces the permission bits on it as on any user (as a non-root user, plain
chmod already does).
"""
from __future__ import annotations

import ctypes
import json
import os
import subprocess
import sys
import threading
import time
import tracemalloc
from pathlib import Path

import pytest

from gpu_widgets import RunFileError, TrainingMonitor
from gpu_widgets.runs.file_reads import MAX_LINE_BYTES
from gpu_widgets.runs.saved_run import MAX_NOTES_PER_FILE

from .conftest import run_cli
from .widget_helpers import run_dir, wait_until  # noqa: F401  (run_dir: runs go under tmp)

HANG_S = 60  # a wide deadline: only a reader that blocks forever misses it
STEP = b'{"step":%d,"time":%d.5,"loss":0.5}\n'
GPU_LINE = b'{"time":1.5,"gpu":0,"name":"A100","utilization_gpu_percent":50,"throttle_reasons":[]}\n'
pytestmark = pytest.mark.skipif(sys.platform == "win32", reason="FIFOs, /dev/zero and capabilities are POSIX")


def make_run(root: Path, name: str, meta: dict | bytes | None = None, steps: bytes | None = None) -> Path:
    d = root / name
    d.mkdir(parents=True)
    if meta is not None:
        (d / "run.json").write_bytes(meta if isinstance(meta, bytes) else json.dumps(meta).encode())
    if steps is not None:
        (d / "steps.jsonl").write_bytes(steps)
    return d


def steps(n: int) -> bytes:
    return b"".join(STEP % (i, 1000 + i) for i in range(n))


def fifo(path: Path) -> Path:
    if path.exists():
        path.unlink()
    os.mkfifo(path)
    return path


def in_thread(fn, *args, **kwargs):
    """``fn(...)``'s result or exception, or a failure when it blocks past HANG_S."""
    out: dict = {}

    def go():
        try:
            out["value"] = fn(*args, **kwargs)
        except BaseException as exc:  # handed to the test
            out["error"] = exc

    t = threading.Thread(target=go, daemon=True)
    t.start()
    t.join(HANG_S)
    assert not t.is_alive(), f"{fn.__name__} blocked for {HANG_S} s"
    if "error" in out:
        raise out["error"]
    return out["value"]


def _drop_dac_capabilities() -> None:
    """In the child before exec: without these two, root obeys file permission bits."""
    libc = ctypes.CDLL(None, use_errno=True)
    for cap in (1, 2):  # CAP_DAC_OVERRIDE, CAP_DAC_READ_SEARCH
        if libc.prctl(24, cap, 0, 0, 0) != 0:  # PR_CAPBSET_DROP
            raise OSError(ctypes.get_errno(), "prctl(PR_CAPBSET_DROP)")


def unprivileged(*cmd: str, env: dict) -> subprocess.CompletedProcess:
    pre = _drop_dac_capabilities if os.geteuid() == 0 else None
    return subprocess.run(list(cmd), capture_output=True, text=True, env=env, timeout=HANG_S, preexec_fn=pre)


@pytest.fixture
def damaged_root(tmp_path):
    """One good run among every kind of damage."""
    root = tmp_path / "log"
    make_run(root, "good", {"title": "good run", "status": "finished", "started": 2000.0}, steps(30))
    make_run(root, "a-list", b"[1, 2, 3]", steps(3))
    make_run(root, "nested", b"[" * 100_000 + b"]" * 100_000, steps(3))
    make_run(root, "big-pid", {"title": "big pid", "status": "running", "pid": 2**70, "host": os.uname().nodename}, steps(4))
    fifo(make_run(root, "fifo-meta", None, steps(5)) / "run.json")
    fifo(make_run(root, "fifo-steps", {"title": "fifo steps", "status": "running"}) / "steps.jsonl")
    os.symlink("/dev/zero", make_run(root, "zero", {"title": "zero", "status": "finished"}) / "steps.jsonl")
    make_run(root, "long-line", {"title": "long line", "status": "finished"}, b"x" * (MAX_LINE_BYTES + 1) + b"\n")
    make_run(root, "escapes", {"title": "\x1b]0;owned\x07\x1b[2J\x9b31m\u202eevil", "status": "\x1b[5mfinished",
                               "started": 1000.0}, steps(2))
    return root


@pytest.mark.integration
def test_runs_lists_every_run_and_names_each_damage_without_hanging_or_crashing(damaged_root):
    out = run_cli("runs", "--all", "--dir", str(damaged_root), timeout=HANG_S)
    assert out.returncode == 0 and out.stderr == "", out.stderr
    table, notes = out.stdout.split("\nnote: ", 1)
    lines = table.splitlines()
    assert len(lines) == 1 + 9  # the header and every run, damaged or not
    good = next(line for line in lines if line.startswith("good run"))
    assert " finished " in good and " 30 " in good
    assert "\x1b" not in out.stdout and "\x9b" not in out.stdout and "\u202e" not in out.stdout
    assert r"\x1b]0;owned\x07\x1b[2J\x9b31m" in out.stdout  # shown, escaped (cut to the column)
    listed = {r["directory"].rsplit("/", 1)[-1]: r for r in json.loads(
        run_cli("runs", "--all", "--json", "--dir", str(damaged_root), timeout=HANG_S).stdout)}
    assert listed["good"]["note"] is None and listed["good"]["steps"] == 30
    assert "is not a JSON object" in listed["a-list"]["note"] and listed["a-list"]["steps"] == 3
    assert "run.json is nested too deeply to read (100,000 levels deep)" in listed["nested"]["note"]
    assert "'pid' is not what gpu-widgets writes" in listed["big-pid"]["note"] and listed["big-pid"]["status"] == "running"
    assert "run.json is a FIFO (named pipe), not a regular file" in listed["fifo-meta"]["note"]
    assert listed["fifo-meta"]["steps"] == 5
    assert "steps.jsonl is a FIFO (named pipe)" in listed["fifo-steps"]["note"]
    assert "steps.jsonl is a character device" in listed["zero"]["note"]
    assert listed["escapes"]["name"].startswith("\x1b]0;owned")  # JSON holds the text; json escapes it
    assert "\\u001b" in run_cli("runs", "--all", "--json", "--dir", str(damaged_root)).stdout
    assert "a-list" in notes and "FIFO" in notes


def test_every_json_file_of_a_run_nested_too_deeply_is_named_in_words(tmp_path):
    from gpu_widgets.runs.gpu_trace import GpuTrace
    from gpu_widgets.runs.launch_dir import rank_hosts, read_heartbeat

    deep = b"[" * 100_000
    # the run.json beside a saved file
    (tmp_path / "saved.jsonl").write_bytes(steps(3))
    (tmp_path / "saved.meta.json").write_bytes(deep)
    with pytest.warns(RuntimeWarning) as caught:
        assert TrainingMonitor.load(tmp_path / "saved.jsonl").step == 2
    assert any("saved.meta.json is nested too deeply to read (100,000 levels deep)" in str(w.message) for w in caught)
    # a launch's files: a rank's run.json and its heartbeat
    launch = tmp_path / "launch"
    for rank in (0, 1):
        (launch / f"rank-{rank}").mkdir(parents=True)
    (launch / "rank-0" / "run.json").write_bytes(deep)
    # (under its 4 KiB limit; the brackets in the string are no nesting)
    (launch / "rank-1" / "heartbeat.json").write_bytes(b'{"phase": "' + b"[" * 500 + b'", "x": ' + b"[" * 3000 + b"}")
    notes: list[str] = []
    assert rank_hosts(launch, {}, notes) == {} and read_heartbeat(launch / "rank-1", notes) is None
    assert notes == [f"{launch / 'rank-0' / 'run.json'} is nested too deeply to read (100,000 levels deep)",
                     f"{launch / 'rank-1' / 'heartbeat.json'} is nested too deeply to read (3,001 levels deep)"]
    # GPU samples read back from the run log: a RunFileError (a ValueError), which their reader notes
    trace = GpuTrace(0.0)
    trace.spill_path, trace.dropped = tmp_path / "gpu.jsonl", 1
    trace.spill_path.write_bytes(deep + b"\n")
    with pytest.raises(RunFileError, match=r"gpu\.jsonl is nested too deeply to read \(100,000 levels deep\)"):
        trace.spilled_rows()


@pytest.mark.integration
def test_a_run_directory_without_read_permission_is_listed_as_unreadable(tmp_path):
    root = tmp_path / "log"
    make_run(root, "good", {"title": "good run", "status": "finished", "started": 2000.0}, steps(3))
    locked = make_run(root, "locked", {"title": "secret", "status": "finished"}, steps(3))
    for p in (tmp_path, root):
        p.chmod(0o755)  # the child may reach the root; only the locked run is shut
    locked.chmod(0)
    try:
        env = {**os.environ, "PYTHONDONTWRITEBYTECODE": "1"}
        out = unprivileged(sys.executable, "-m", "gpu_widgets.cli", "runs", "--json", "--dir", str(root), env=env)
        code = ("import sys\nfrom gpu_widgets import TrainingMonitor\ntry:\n"
                "    TrainingMonitor.follow(sys.argv[1], display=False)\n"
                "except OSError as exc:\n    print(type(exc).__name__, exc)\n")
        follow = unprivileged(sys.executable, "-c", code, str(locked), env=env)
    finally:
        locked.chmod(0o755)
    assert out.returncode == 0, out.stderr
    listed = {Path(r["directory"]).name: r for r in json.loads(out.stdout)}
    assert listed["good"]["status"] == "finished" and listed["good"]["steps"] == 3
    assert listed["locked"]["status"] == "unreadable" and "Permission denied" in listed["locked"]["note"]
    assert follow.returncode == 0 and "Traceback" not in follow.stderr, follow.stderr
    assert follow.stdout.startswith(f"PermissionError {locked} cannot be read (Permission denied)"), follow.stdout


def test_load_names_what_is_not_a_regular_file_and_never_blocks(tmp_path):
    run = make_run(tmp_path, "r", {"title": "t", "status": "finished"}, steps(3))
    fifo(run / "steps.jsonl")
    with pytest.raises(RunFileError, match=r"steps\.jsonl is a FIFO \(named pipe\), not a regular file"):
        in_thread(TrainingMonitor.load, run)
    (run / "steps.jsonl").unlink()
    os.symlink("/dev/zero", run / "steps.jsonl")
    with pytest.raises(RunFileError, match=r"steps\.jsonl is a character device"):
        in_thread(TrainingMonitor.load, run)
    (run / "steps.jsonl").unlink()
    (run / "steps.jsonl").write_bytes(steps(3))
    fifo(run / "run.json")
    fifo(run / "gpu.jsonl")
    with pytest.warns(RuntimeWarning) as caught:
        back = in_thread(TrainingMonitor.load, run)
    assert back.step == 2  # the steps are the run: they load (0, 1, 2)
    said = " ".join(str(w.message) for w in caught)
    assert "run.json is a FIFO" in said and "gpu.jsonl is a FIFO (named pipe), not a regular file" in said


def test_every_line_read_is_bounded_and_named_when_over_the_limit(tmp_path):
    run = make_run(tmp_path, "r", {"title": "t", "status": "finished"})
    path = run / "steps.jsonl"
    path.write_bytes(steps(1) + b'{"step":1,"pad":"' + b"x" * MAX_LINE_BYTES + b'"}\n' + steps(2))
    with pytest.raises(RunFileError, match=rf"^{path}: line 2 is longer than 1,048,576 bytes"):
        TrainingMonitor.load(run)
    path.write_bytes(steps(1) + b"y" * (3 * MAX_LINE_BYTES))  # a last line without end, far over: not held
    with pytest.raises(RunFileError, match="line 2 is longer than"):
        TrainingMonitor.load(run)
    # In a side file the line is skipped with a note; the lines after it keep their numbers.
    path.write_bytes(steps(3))
    (run / "gpu.jsonl").write_bytes(GPU_LINE + b"z" * (MAX_LINE_BYTES + 5) + b"\n" + GPU_LINE + b"not json\n" + GPU_LINE)
    with pytest.warns(RuntimeWarning) as caught:
        back = TrainingMonitor.load(run)
    said = [str(w.message) for w in caught]
    assert any("gpu.jsonl: line 2 is longer than 1,048,576 bytes" in s and s.endswith("skipped") for s in said)
    assert any("gpu.jsonl: line 4 is not JSON" in s for s in said)
    assert len(back.gpu_rows()) == 3 and back.step == 2


def test_bad_side_file_lines_are_skipped_with_a_bounded_number_of_notes(tmp_path):
    run = make_run(tmp_path, "r", {"title": "t", "status": "finished"}, steps(3))
    bad = b'{"time": 1.0, "wait_s": 2.0, "step_s": 1.0, "steps": 3}\n'
    good = b'{"time": 1001.0, "wait_s": 0.1, "step_s": 0.2, "steps": 20}\n'
    (run / "data_wait.jsonl").write_bytes(good + bad * 500 + good)
    (run / "alerts.jsonl").write_bytes(b'[1]\n{"id": "a", "kind": "lost", "gpu": 0, "start": 1001.0, "end": null}\n')
    with pytest.warns(RuntimeWarning) as caught:
        back = TrainingMonitor.load(run)
    said = [str(w.message) for w in caught]
    waits = [s for s in said if "data_wait.jsonl" in s]
    assert len(waits) == MAX_NOTES_PER_FILE + 1 and waits[-1].endswith("480 more lines skipped")
    assert any("alerts.jsonl: line 1 is not a JSON object" in s for s in said)
    assert back.data_wait_share == pytest.approx(0.5)


def test_load_holds_less_than_four_times_the_file_size(tmp_path):
    run = make_run(tmp_path, "big", {"title": "big", "status": "finished"})
    path = run / "steps.jsonl"
    with open(path, "wb") as f:
        for start in range(0, 100_000, 10_000):
            f.write(b"".join(b'{"step":%d,"time":%.3f,"loss":%r}\n' % (i, 1.79e9 + i * 0.01, 1 / (i + 1))
                             for i in range(start, start + 10_000)))
    size = path.stat().st_size
    TrainingMonitor.load(make_run(tmp_path, "warm", {"status": "finished"}, steps(10)))  # imports and caches first
    tracemalloc.start()
    try:
        mon = TrainingMonitor.load(run)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert mon.step == 99_999
    assert peak < 4 * size, f"load() peaked at {peak / 1e6:.1f} MB for a {size / 1e6:.1f} MB file"


def follow_bg(path: Path, **kw) -> TrainingMonitor:
    mon = in_thread(TrainingMonitor.follow, path, display=False, poll_s=0.02, **kw)
    return mon


def problems(mon: TrainingMonitor) -> str:
    return " | ".join(mon.parts.run.errors)


def test_follow_says_why_when_run_json_cannot_be_read(tmp_path):
    for name, meta, words in [
        ("a-list", b"[1, 2]", "run.json is not a JSON object"),
        ("nested", b"[" * 100_000, "run.json is nested too deeply to read (100,000 levels deep)"),
        ("fifo", None, "run.json is a FIFO (named pipe), not a regular file"),
    ]:
        run = make_run(tmp_path, name, b"{}", steps(4))
        if meta is None:
            fifo(run / "run.json")
        else:
            (run / "run.json").write_bytes(meta)
        mon = follow_bg(run)
        try:
            wait_until(lambda: mon.step == 3 and words in problems(mon), timeout=HANG_S)
            assert "following cannot tell when the run ends" in problems(mon)
            assert mon.parts.follower.thread.is_alive()  # it keeps reading, and said why it cannot end
        finally:
            mon.parts.follower.stop.set()


def test_follow_of_a_70_bit_pid_and_fifo_files_notes_them_and_ends(tmp_path):
    run = make_run(tmp_path, "r", {"title": "t", "status": "finished", "pid": 2**70, "host": os.uname().nodename},
                   steps(6))
    fifo(run / "gpu.jsonl")
    mon = follow_bg(run)
    assert mon.parts.follower.done.wait(HANG_S), "the follower never ended"
    assert mon.step == 5 and mon.status == "finished"
    assert "'pid' is not what gpu-widgets writes" in problems(mon)
    assert "gpu.jsonl is a FIFO (named pipe), not a regular file (only those are read): not read" in problems(mon)


def test_follow_stops_with_a_note_when_the_steps_file_shrinks_or_is_replaced(tmp_path):
    for how in ("truncated", "replaced"):
        run = make_run(tmp_path, how, {"title": "t", "status": "running", "pid": os.getpid(),
                                       "host": os.uname().nodename}, steps(50))
        mon = follow_bg(run)
        try:
            wait_until(lambda: mon.step == 49, timeout=HANG_S)
            if how == "truncated":  # another run rewrote it in place
                (run / "steps.jsonl").write_bytes(steps(5))
            else:  # written beside it and renamed over it: a new inode, bigger than before
                (run / "new.tmp").write_bytes(steps(80))
                os.replace(run / "new.tmp", run / "steps.jsonl")
            assert mon.parts.follower.done.wait(HANG_S)
            words = "shrank to" if how == "truncated" else "was replaced by another file"
            assert words in problems(mon) and "would mix two runs" in problems(mon)
            assert mon.step == 49 and mon.status == "unfinished"  # the first run's rows only
        finally:
            mon.parts.follower.stop.set()


def test_follow_skips_a_line_over_the_limit_and_reads_on(tmp_path):
    run = make_run(tmp_path, "r", {"title": "t", "status": "running", "pid": os.getpid(),
                                   "host": os.uname().nodename}, steps(2))
    mon = follow_bg(run)
    try:
        wait_until(lambda: mon.step == 1, timeout=HANG_S)
        with open(run / "steps.jsonl", "ab") as f:  # written in parts, as a slow writer would
            f.write(b'{"step":2,"x":"' + b"x" * MAX_LINE_BYTES)
            f.flush()
            time.sleep(0.2)
            f.write(b"x" * MAX_LINE_BYTES + b'"}\n' + STEP % (3, 1003))
        wait_until(lambda: mon.step == 3, timeout=HANG_S)
        assert "steps.jsonl: line 3 is longer than 1,048,576 bytes, the most a run's line may hold: skipped" in problems(mon)
    finally:
        mon.parts.follower.stop.set()
