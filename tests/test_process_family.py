"""A process's family, read from the per-thread children files (and psutil's walk where there are
none): a real tree with a child forked from a second thread and a grandchild, the same members
both ways; a bound on the members; a process that ended."""
from __future__ import annotations

import subprocess
import sys
import textwrap
import time

import psutil
import pytest

from gpu_widgets.service import process_family

pytestmark = pytest.mark.integration  # every test here starts a process

TREE = textwrap.dedent("""
    import subprocess, sys, threading, time
    kids = [subprocess.Popen([sys.executable, "-c",
                              "import subprocess, time; subprocess.Popen(['sleep', '60']); time.sleep(60)"])]
    t = threading.Thread(target=lambda: kids.append(subprocess.Popen(["sleep", "60"])))
    t.start(); t.join()
    print("ready", flush=True)
    time.sleep(60)
""")


@pytest.fixture
def tree():
    """A root with two children (one forked from a thread) and a grandchild; the root's pid."""
    root = subprocess.Popen([sys.executable, "-c", TREE], stdout=subprocess.PIPE, text=True)
    try:
        assert root.stdout is not None and root.stdout.readline().strip() == "ready"
        deadline = time.monotonic() + 30
        while len(psutil.Process(root.pid).children(recursive=True)) < 3:  # the grandchild comes last
            assert time.monotonic() < deadline, "the tree did not grow in 30 s"
            time.sleep(0.05)
        yield root.pid
    finally:
        for p in psutil.Process(root.pid).children(recursive=True):
            p.kill()
        root.kill()
        root.wait()


def test_the_family_is_the_root_and_everything_below_it_both_ways(tree, monkeypatch):
    expected = {tree, *(p.pid for p in psutil.Process(tree).children(recursive=True))}
    assert len(expected) == 4
    if not process_family.HAS_CHILDREN_FILES:
        pytest.skip("this Linux kernel lists no children files (CONFIG_PROC_CHILDREN off)")
    assert process_family.family(tree) == expected
    monkeypatch.setattr(process_family, "HAS_CHILDREN_FILES", False)
    assert process_family.family(tree) == expected


@pytest.mark.parametrize("children_files", [True, False])
def test_a_family_is_bounded_and_an_ended_process_has_none(tree, monkeypatch, children_files):
    if children_files and not process_family.HAS_CHILDREN_FILES:
        pytest.skip("this Linux kernel lists no children files (CONFIG_PROC_CHILDREN off)")
    monkeypatch.setattr(process_family, "HAS_CHILDREN_FILES", children_files)
    two = process_family.family(tree, limit=2)
    assert two is not None and len(two) == 2 and tree in two
    ended = subprocess.Popen(["true"])
    ended.wait()
    assert process_family.family(ended.pid) is None
