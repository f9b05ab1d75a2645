"""The device-file scan and the matching rules behind GPU processes in a container: real processes
holding stand-in device files, read through the real /proc."""
from __future__ import annotations

import os
import pwd
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from gpu_widgets.backends.device_files import DeviceFileScan, pid_namespace_is_init
from gpu_widgets.backends.local_pids import LocalPids
from gpu_widgets.backends.pid_match import (DEVICE_FILES, MEMORY_UNKNOWN, NOT_TOLD, OUTSIDE, PID, Match,
                                            by_device_files)

from .container_fixtures import stand_in_dev

GIB = 1 << 30
ROOT = Path(__file__).resolve().parents[1]


def holder(dev: Path, *names: str, user: str | None = None) -> subprocess.Popen:
    """A process that opens ``names`` of ``dev`` and waits (as ``user`` where given)."""
    paths = [str(dev / n) for n in names]
    code = f"import sys, time; _h = [open(p) for p in {paths!r}]; print('ready', flush=True); time.sleep(300)"
    prefix = ["setpriv", f"--reuid={user}", f"--regid={user}", "--clear-groups"] if user else []
    proc = subprocess.Popen([*prefix, sys.executable, "-c", code], stdout=subprocess.PIPE, text=True)
    assert proc.stdout is not None and proc.stdout.readline().strip() == "ready"
    return proc


@pytest.fixture
def dev() -> Iterator[Path]:
    # Outside pytest's tmp folders (mode 700): another user's holder opens these files too.
    root = Path(tempfile.mkdtemp(prefix="gw-dev-"))
    root.chmod(0o755)
    try:
        yield stand_in_dev(root, 2)
    finally:
        shutil.rmtree(root, ignore_errors=True)


@pytest.mark.integration
def test_the_scan_finds_cuda_users_by_their_files_and_not_nvml_only_ones(dev: Path):
    cuda0 = holder(dev, "nvidiactl", "nvidia-uvm", "nvidia0")
    both = holder(dev, "nvidia-uvm", "nvidia0", "nvidia1", "nvidia-caps/nvidia-cap2")
    nvml_only = holder(dev, "nvidiactl", "nvidia0", "nvidia1")  # a sampler: no nvidia-uvm
    try:
        scan = DeviceFileScan(str(dev))
        found = scan.holders()
        assert found.of(0) == {cuda0.pid, both.pid} and found.of(1) == {both.pid}
        assert found.caps == {both.pid: frozenset({2})} and found.of(None) == set()
        assert found.denied == 0 and found.scanned > 3
        # Cached: a second scan reads no process again and does not list /proc; a refresh reads them all
        reads = scan.reads
        assert scan.holders().of(0) == {cuda0.pid, both.pid} and scan.reads == reads and scan.listings == 1
        fresh = DeviceFileScan(str(dev), refresh_share=1.0)  # paced to a whole core: no wait to speak of
        fresh.holders()
        time.sleep(0.5)
        reads = fresh.reads
        assert fresh.holders(refresh=True).of(1) == {both.pid} and fresh.reads >= reads + found.scanned - 1
        # A holder that ended is dropped at the next scan
        cuda0.kill()
        cuda0.wait()
        assert scan.holders().of(0) == {both.pid}
    finally:
        for p in (cuda0, both, nvml_only):
            p.kill()
            p.wait()


@pytest.mark.integration
def test_an_other_users_process_is_skipped_and_counted_when_not_root(dev: Path):
    if os.geteuid() != 0 or shutil.which("setpriv") is None:
        pytest.skip("needs root and setpriv to run the scan as another user")
    nobody = pwd.getpwnam("nobody").pw_uid
    as_nobody = ["setpriv", f"--reuid={nobody}", f"--regid={nobody}", "--clear-groups", sys.executable]
    probe = subprocess.run([*as_nobody, "-c", f"import sys; sys.path.insert(0, {str(ROOT)!r}); import gpu_widgets"],
                           capture_output=True, text=True, timeout=60, cwd="/")
    if probe.returncode != 0:  # a checkout or venv under a folder only root may enter
        pytest.skip(f"user nobody cannot run this checkout's Python: {probe.stderr.strip()[-200:]}")
    ours = holder(dev, "nvidia-uvm", "nvidia0")  # root's: the scan below runs as nobody
    theirs = holder(dev, "nvidia-uvm", "nvidia1", user=str(nobody))
    try:
        code = (f"import sys; sys.path.insert(0, {str(ROOT)!r})\n"
                "from gpu_widgets.backends.local_pids import LocalPids\n"
                "from gpu_widgets.backends.device_files import DeviceFileScan\n"
                f"found = DeviceFileScan({str(dev)!r}).holders()\n"
                "print(sorted(found.of(0)), sorted(found.of(1)), found.denied)\n"
                f"local = LocalPids({str(dev)!r}); local.init_namespace = False\n"
                f"local.begin_read(); local.match(0, 0, [({ours.pid + 10**6}, 1)])\n"
                "print(local.note())\n")
        done = subprocess.run(["setpriv", f"--reuid={nobody}", f"--regid={nobody}", "--clear-groups",
                               sys.executable, "-c", code], capture_output=True, text=True, timeout=60,
                              cwd="/", env={**os.environ, "PYTHONDONTWRITEBYTECODE": "1"})
        assert done.returncode == 0, done.stderr
        first, note = done.stdout.splitlines()[:2]
        zero, one, denied = first.split("] ")[0] + "]", first.split("] ")[1] + "]", int(first.split()[-1])
        assert zero == "[]" and one == f"[{theirs.pid}]" and denied >= 1, done.stdout  # root's not readable
        assert "processes of other users could not be looked at" in note and "--pid=host" in note, note
    finally:
        for p in (ours, theirs):
            p.kill()
            p.wait()


def test_matching_gives_memory_only_where_the_counts_decide_it():
    one = by_device_files([(9001, 3 * GIB)], {12})
    assert one == [Match(12, 9001, 3 * GIB, DEVICE_FILES)]
    # No entry on the GPU: its file's holders only opened it (CUDA opens every GPU's file)
    assert by_device_files([], {12, 13}) == []
    # Two local, three listed: local memory unknown, the entries apart and not told apart
    mixed = by_device_files([(9001, GIB), (9002, 2 * GIB), (9003, 3 * GIB)], {12, 13})
    assert [m for m in mixed if m.pid is not None] == [Match(12, None, None, DEVICE_FILES, MEMORY_UNKNOWN),
                                                       Match(13, None, None, DEVICE_FILES, MEMORY_UNKNOWN)]
    assert [(m.nvml_pid, m.memory, m.note) for m in mixed if m.pid is None] == [
        (9001, GIB, NOT_TOLD), (9002, 2 * GIB, NOT_TOLD), (9003, 3 * GIB, NOT_TOLD)]
    # Equal sizes: every process's figure is known, which host pid is which is not
    assert by_device_files([(9001, GIB), (9002, GIB)], {12, 13}) == [Match(12, None, GIB, DEVICE_FILES),
                                                                     Match(13, None, GIB, DEVICE_FILES)]
    # Unknown sizes never count as equal
    assert all(m.memory is None for m in by_device_files([(9001, None), (9002, None)], {12, 13}))
    # None of ours on the GPU: all outside; a driver that does give local pids: matched by pid
    assert by_device_files([(9001, GIB)], set()) == [Match(None, 9001, GIB, None, OUTSIDE)]
    assert by_device_files([(12, GIB), (9001, 2 * GIB)], {12, 13}) == [Match(12, 12, GIB, PID),
                                                                       Match(13, 9001, 2 * GIB, DEVICE_FILES)]


def test_the_host_namespace_costs_nothing_and_unknown_namespaces_fall_back_to_existence(dev: Path):
    assert pid_namespace_is_init() in (True, False)
    local = LocalPids(str(dev))
    local.init_namespace = True
    local.begin_read()
    assert local.match(0, 0, [(123, GIB)]) == [Match(123, 123, GIB, PID)]
    assert local.scans == 0 and local.note() is None
    gone = LocalPids(str(dev), exists=lambda pid: False)
    gone.init_namespace = None
    gone.begin_read()
    assert gone.match(0, 0, [(123, GIB)]) == [Match(None, 123, GIB, None, OUTSIDE)] and gone.host_pids
    seen = LocalPids(str(dev), exists=lambda pid: True)
    seen.init_namespace = None
    seen.begin_read()
    assert seen.match(0, 0, [(os.getpid(), GIB)])[0].matched_by == PID and not seen.host_pids


@pytest.mark.integration
def test_a_holder_whose_pid_is_reused_is_read_again(dev: Path, monkeypatch: pytest.MonkeyPatch):
    from gpu_widgets.backends import device_files

    proc = holder(dev, "nvidia-uvm", "nvidia0")
    try:
        scan = DeviceFileScan(str(dev))
        assert scan.holders().of(0) == {proc.pid}
        reads = scan.reads
        # The same pid with another start time: another process, read again rather than trusted
        monkeypatch.setattr(device_files, "_start_time", lambda _proc, pid: f"later-{time.monotonic()}")
        scan.holders()
        assert scan.reads == reads + 1
    finally:
        proc.kill()
        proc.wait()


@pytest.mark.integration
def test_refreshes_are_paced_and_new_processes_are_listed_at_their_own_pace(dev: Path):
    first = holder(dev, "nvidia-uvm", "nvidia0")
    late = None
    try:
        scan = DeviceFileScan(str(dev), list_every_s=0.5, refresh_share=0.02)
        t = time.perf_counter()
        assert scan.holders().of(0) == {first.pid}
        took = time.perf_counter() - t
        # A refresh asked at once waits for the pace (the first scan's cost / 0.02), then comes unasked
        reads = scan.reads
        scan.holders(refresh=True)
        assert scan.pending and scan.reads == reads
        deadline = time.monotonic() + took / 0.02 + 30
        while scan.pending and time.monotonic() < deadline:
            time.sleep(0.05)
            scan.holders()
        assert not scan.pending and scan.reads > reads
        # A process that starts holding the files is seen at the next listing, within list_every_s
        late = holder(dev, "nvidia-uvm", "nvidia0")
        listings = scan.listings
        seen = scan.holders().of(0)
        if scan.listings == listings:
            assert seen == {first.pid}
            time.sleep(0.6)
        assert scan.holders().of(0) == {first.pid, late.pid} and scan.listings > listings
    finally:
        for p in (first, late):
            if p is not None:
                p.kill()
                p.wait()


def test_a_forked_child_holding_its_parents_files_is_no_context_of_its_own():
    # The kernel (12) and its forked DataLoader worker (13) hold GPU 0's file; the driver lists one context
    one = by_device_files([(9001, 3 * GIB)], {12, 13}, {13: 12, 12: 1})
    assert one == [Match(12, 9001, 3 * GIB, DEVICE_FILES)]
    # Without parents known, or with two contexts listed, nothing is guessed
    assert all(m.memory is None for m in by_device_files([(9001, 3 * GIB)], {12, 13}) if m.pid is not None)
    two = by_device_files([(9001, GIB), (9002, 2 * GIB)], {12, 13, 14}, {13: 12, 14: 12})
    assert [m.note for m in two if m.pid is not None] == [MEMORY_UNKNOWN] * 3
