"""log() at any rate and from any thread: the run log keeps up (a killed process loses at most about
a second of rows), a stuck writer never hangs the loop, and rows from several threads stay whole."""
from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from gpu_widgets import TrainingMonitor
from gpu_widgets.monitor import run_recording as monitor_module
from gpu_widgets.runs.run_log import RunLog

from .widget_helpers import run_dir, simulated_sampler  # noqa: F401

TIGHT_LOOP = """
import sys, time
from gpu_widgets import TrainingMonitor
mon = TrainingMonitor("tight", display=False, run_log=sys.argv[1], flush_s=float(sys.argv[2]))
mon.log(loss=1.0, i=0)
print(time.time(), flush=True)
i = 1
while True:  # nothing but log(): as fast as the loop can go, until killed
    mon.log(loss=1.0 / (i + 1), i=i)
    i += 1
"""


def kill_tight_loop(root: Path, after_s: float, flush_s: float) -> tuple[float, list[dict]]:
    """Start a process that logs in a tight loop, SIGKILL it ``after_s`` after its first row;
    returns the kill time and the complete rows on disk."""
    env = {**os.environ, "GPU_WIDGETS_BACKEND": "simulated"}
    proc = subprocess.Popen([sys.executable, "-c", TIGHT_LOOP, str(root), str(flush_s)], env=env,
                            stdout=subprocess.PIPE, text=True)
    try:
        started = float(proc.stdout.readline())
        time.sleep(max(0.0, started + after_s - time.time()))
        killed_at = time.time()
        os.kill(proc.pid, signal.SIGKILL)
    finally:
        proc.kill()
        proc.wait(timeout=30)
        proc.stdout.close()
    (run,) = [p for p in root.iterdir() if p.is_dir()]
    text = (run / "steps.jsonl").read_text(encoding="utf-8")
    return killed_at, [json.loads(line) for line in text.split("\n")[:-1]]  # a torn last line is skipped


@pytest.mark.integration
def test_a_tight_logging_loop_killed_loses_at_most_about_a_flush_interval(tmp_path):
    """SIGKILL (no atexit, no finally) a loop that does nothing but log(): the rows on disk cover
    all but the last ~flush interval, from the first second on (the writer used to fall behind
    for good at ~10^5 rows/s: empty after 1 s, 3.7 s of rows lost after 4 s)."""
    flush_s = 0.5
    bound_s = 2 * (flush_s + monitor_module.WRITE_TICK_S)  # twice the promise: a shared, busy machine
    for after_s in (1.0, 3.0):
        root = tmp_path / f"after-{after_s}"
        killed_at, rows = kill_tight_loop(root, after_s, flush_s)
        assert rows, f"killed {after_s} s in: nothing on disk"
        assert [r["step"] for r in rows] == list(range(len(rows)))  # no gaps, no duplicates
        assert all(r["i"] == r["step"] and r["loss"] == 1.0 / (r["step"] + 1) for r in rows[1:])
        lost = killed_at - rows[-1]["time"]
        assert lost < bound_s, f"killed {after_s} s in: the last {lost:.2f} s of rows were lost ({len(rows)} on disk)"


def test_a_stuck_writer_never_hangs_the_loop(monkeypatch, run_dir):
    """A writer that cannot write (a hung disk) holds log() back for WAIT_LIMIT_S once, then never
    again; what was logged is all written once the disk answers."""
    monkeypatch.setattr(monitor_module, "WAIT_LIMIT_S", 0.5)
    disk = threading.Event()
    write_steps = RunLog.write_steps

    def hung(self, lines):
        disk.wait(30)
        write_steps(self, lines)

    monkeypatch.setattr(RunLog, "write_steps", hung)
    mon = TrainingMonitor("stuck", display=False, sampler=simulated_sampler(), flush_s=0.1)
    slowest, i = 0.0, 0
    end = time.monotonic() + 1.5  # the wait gives up 0.2 s + 0.5 s in
    while time.monotonic() < end:
        t = time.monotonic()
        mon.log(i=i)
        slowest = max(slowest, time.monotonic() - t)
        i += 1
    assert any("log() no longer waits for it" in e for e in mon.errors)
    assert 0.5 <= slowest < 0.5 + 1.0  # waited once, for the limit (a wide margin above it)
    disk.set()
    mon.finish()
    lines = (mon.run_dir / "steps.jsonl").read_text().splitlines()
    assert [json.loads(x)["i"] for x in lines] == list(range(i))


def test_log_from_two_threads_keeps_every_row_whole(run_dir):
    """Two threads logging at once: every call is one whole row, none lost, none merged; the run
    log holds the same rows. (Without the lock, rows merged and values landed on other rows.)"""
    mon = TrainingMonitor("threads", display=False, sampler=simulated_sampler())
    n = 30_000
    start = threading.Barrier(2)

    def loop(key: str) -> None:
        start.wait()
        for i in range(n):
            mon.log(**{key: i, f"{key}_sq": i * i})

    switch = sys.getswitchinterval()
    sys.setswitchinterval(1e-6)  # switch threads as often as possible: mid-row, if rows can tear
    try:
        threads = [threading.Thread(target=loop, args=(k,)) for k in ("a", "b")]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
    finally:
        sys.setswitchinterval(switch)
    mon.finish()
    rows = mon.rows()
    assert [r["step"] for r in rows] == list(range(2 * n))
    for key in ("a", "b"):
        mine = [r for r in rows if key in r]
        assert [r[key] for r in mine] == list(range(n))  # each thread's rows, in its order
        assert all(r[f"{key}_sq"] == r[key] ** 2 and len(r) == 4 for r in mine)  # whole rows, nothing merged
    lines = [json.loads(x) for x in (mon.run_dir / "steps.jsonl").read_text().splitlines()]
    assert [{k: v for k, v in r.items() if k != "time"} for r in lines] == \
           [{k: v for k, v in r.items() if k != "time"} for r in rows]


def test_uniform_rows_are_written_exactly_as_json_writes_them():
    """The run log's fast path (rows with the same keys) writes what json.dumps writes; a NaN, an
    infinity or a key in some rows only takes the general path, with the same result."""
    from gpu_widgets.runs.records import Records

    rec = Records()
    for i in range(200):
        values = {"loss": 1.0 / (i + 1), "acc %": i / 3, 'say "hi"': i, "température": -i * 1e-300,
                  "tokens": 2**62 + i, "flag": i % 2 == 0}
        if i == 120:
            values["loss"] = float("nan")
        if i == 130:
            values["loss"] = -float("inf")
        if i >= 150:
            values["late"] = 0.5
        rec.append(i, 1.7e9 + i / 7, values)
    assert rec._uniform_jsonl(0, 100) is not None and rec._uniform_jsonl(150, 200) is not None
    assert rec._uniform_jsonl(100, 140) is None and rec._uniform_jsonl(140, 160) is None
    for start, stop in [(0, 100), (150, 200), (100, 140), (140, 160), (0, 200), (199, 200)]:
        expected = "".join(json.dumps(r, separators=(",", ":")) + "\n" for r in rec.rows(start, stop))
        assert rec.jsonl(start, stop) == expected, (start, stop)


SIGNALS = """
import itertools, json, os, signal, threading, time
from gpu_widgets import TrainingMonitor
mon = TrainingMonitor("signals", display=False, run_log=False)
numbers, deferred = itertools.count(), [0]
log_reentered = TrainingMonitor._log_reentered
def counted(self):
    deferred[0] += len(self._reentered)
    log_reentered(self)
TrainingMonitor._log_reentered = counted
def handler(signum, frame):
    # Runs on the main thread between any two bytecodes of the loop's log(), or of another handler.
    mon.log(sig=next(numbers))
signal.signal(signal.SIGUSR1, handler)
stop = threading.Event()
def send():
    while not stop.is_set():
        os.kill(os.getpid(), signal.SIGUSR1)
        time.sleep(0.0002)
threading.Thread(target=send, daemon=True).start()
n, end = 0, time.monotonic() + 1.5
while time.monotonic() < end:
    for _ in range(1000):
        mon.log(i=n, sq=n * n)
        n += 1
stop.set()
time.sleep(0.1)
mon.finish()
print(json.dumps({"n": n, "sent": next(numbers), "deferred": deferred[0], "rows": mon.rows()}))
"""


@pytest.mark.integration
def test_log_in_a_signal_handler_during_log_neither_deadlocks_nor_tears_rows():
    """A signal handler that logs (e.g. on SIGTERM before a preemption) can run in the middle of
    the loop's own log(): its row is added right after, whole; no deadlock on the lock."""
    out = subprocess.run([sys.executable, "-c", SIGNALS], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr[-2000:]
    r = json.loads(out.stdout)
    rows, n, sent = r["rows"], r["n"], r["sent"]
    assert sent > 100 and r["deferred"] > 0  # handlers did run inside log()
    assert len(rows) == n + sent and [x["step"] for x in rows] == list(range(n + sent))
    loop = [x for x in rows if "i" in x]
    assert [x["i"] for x in loop] == list(range(n)) and all(x["sq"] == x["i"] ** 2 and len(x) == 4 for x in loop)
    assert sorted(x["sig"] for x in rows if "sig" in x) == list(range(sent))  # a handler may interrupt a handler
    assert all(len(x) == 3 for x in rows if "sig" in x)
