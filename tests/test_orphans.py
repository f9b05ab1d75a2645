"""Orphaned GPU holders: a real kernel of a real server starts children that the fake NVML lists on
a GPU; the kernel is shut down; its children are listed as orphans of its notebook, Kill ends the
server user's own (through real HTTP, token and XSRF rules) and refuses another user's."""
from __future__ import annotations

import asyncio
import json
import os
import time

import psutil
import pytest
from tornado.httpclient import HTTPClientError

from gpu_widgets.service.orphans import OrphanBook

from .api_schema import validate_response

GIB = 1 << 30
PREFIX = ("gpu-widgets", "api", "v1")
NVML_SERVER = {"backend": "nvml", "interval_s": 0.1, "slow_interval_s": 0.2}
SLEEP = "import time; time.sleep(600)"
NOBODY = 65534


async def processes(jp_fetch) -> dict[int, dict]:
    body = json.loads((await jp_fetch(*PREFIX, "processes")).body)
    validate_response("/processes", body)
    return {p["pid"]: p for d in body["devices"] for p in d["processes"] or ()}


async def kill(jp_fetch, pid, **kw):
    return await jp_fetch(*PREFIX, "processes", str(pid), "kill", method="POST", body="", **kw)


async def refused(jp_fetch, pid, code, **kw) -> dict:
    with pytest.raises(HTTPClientError) as info:
        await kill(jp_fetch, pid, **kw)
    assert info.value.code == code, info.value.response.body
    return json.loads(info.value.response.body)


async def run_cell(kernel, code: str) -> None:
    client = kernel.client()
    client.start_channels()
    try:
        await client.wait_for_ready(timeout=60)
        reply = await client.execute_interactive(code, timeout=60)
        assert reply["content"]["status"] == "ok", reply["content"]
    finally:
        client.stop_channels()


def test_the_book_dates_the_end_and_tells_a_reused_pid_apart():
    me = os.getpid()  # a descendant of the "kernel" whose pid is our parent
    book = OrphanBook(limit=1)
    book.note([me], {os.getppid(): "k1"}, {"k1": "a.ipynb"}, frozenset({"k1"}), now=10.0)
    assert book.orphan_of(me) is None, "its kernel lives"
    book.note([me], {}, {}, frozenset(), now=20.0)
    book.note([me], {}, {}, frozenset(), now=30.0)
    assert book.orphan_of(me) == {"kernel_id": "k1", "notebook_path": "a.ipynb", "ended": 20.0}
    book._entries[me] = book._entries[me]._replace(started=1.0)  # as if the pid were handed on
    book.note([me], {}, {}, frozenset())
    assert book.orphan_of(me) is None and len(book) == 0
    book.note([me], {os.getppid(): "k1"}, {}, frozenset({"k1"}))
    book.note([], {}, {}, frozenset())
    assert len(book) == 0, "off every GPU: forgotten"


@pytest.mark.parametrize("gw_config,fake_nvml_config", [(NVML_SERVER, {"gpus": [{"util_gpu": 0}]})])
async def test_a_shut_down_kernels_child_is_an_orphan_and_kill_ends_it(in_process_fake_nvml, jp_fetch,
                                                                       jp_serverapp):
    session = json.loads((await jp_fetch("api", "sessions", method="POST", body=json.dumps(
        {"path": "train.ipynb", "type": "notebook", "name": "train.ipynb", "kernel": {"name": "python3"}}))).body)
    kernel_id = session["kernel"]["id"]
    kernel = jp_serverapp.kernel_manager.get_kernel(kernel_id)
    kernel_pid = kernel.provisioner.pid
    as_root = os.geteuid() == 0
    # A child of the server's user, and (where we may start one) a child run as another user, in its own
    # session: a shutdown signals the kernel's process group, which ends the children that stayed in it.
    other = (f"subprocess.Popen(['sleep', '600'], user={NOBODY}, group={NOBODY}, extra_groups=[], start_new_session=True)"
             if as_root else "")
    await run_cell(kernel, f"import subprocess, sys\nsubprocess.Popen([sys.executable, '-c', {SLEEP!r}], start_new_session=True)\n{other}")
    children = {c.uids().real: c for c in psutil.Process(kernel_pid).children()}
    mine = children[os.getuid()]
    theirs = children.get(NOBODY)
    try:
        on_gpu = [(c.pid, GIB) for c in children.values()]
        in_process_fake_nvml({"gpus": [{"util_gpu": 0, "procs": on_gpu}]})
        deadline = time.monotonic() + 20
        while (await processes(jp_fetch)).get(mine.pid, {}).get("kernel_id") != kernel_id:
            assert time.monotonic() < deadline, "the child never showed as the kernel's"
            await asyncio.sleep(0.2)
        assert (await processes(jp_fetch))[mine.pid]["orphan_of"] is None
        book = jp_serverapp.web_app.settings["gpu_widgets_orphans"]
        while book.started(mine.pid) is None:  # the watch's next round (orphan_watch.WATCH_S)
            assert time.monotonic() < deadline, "the watch never noted the child"
            await asyncio.sleep(0.2)
        # A live kernel's process is no orphan: Kill refuses it.
        body = await refused(jp_fetch, mine.pid, 403)
        assert body["code"] == "not_an_orphan" and "not an orphan of this server's kernels" in body["message"]

        await jp_fetch("api", "sessions", session["id"], method="DELETE")
        shut = time.time()
        deadline = time.monotonic() + 10
        while (listed := await processes(jp_fetch))[mine.pid]["orphan_of"] is None:
            assert time.monotonic() < deadline, f"not an orphan within 10 s: {listed[mine.pid]}"
            await asyncio.sleep(0.2)
        orphan = listed[mine.pid]["orphan_of"]
        assert orphan["kernel_id"] == kernel_id and orphan["notebook_path"] == "train.ipynb"
        assert shut - 1 <= orphan["ended"] <= time.time() and listed[mine.pid]["kernel_id"] is None

        # Without the token a write meets Jupyter's XSRF check; a bad pid and an unknown one say so.
        body = await refused(jp_fetch, mine.pid, 403, headers={"Authorization": ""})
        assert "_xsrf" in body["message"]
        assert "not a process id" in (await refused(jp_fetch, "12x", 400))["message"]
        assert "no GPU process with pid 1 " in (await refused(jp_fetch, 1, 404))["message"] or os.getpid() == 1
        if theirs is not None:
            assert listed[theirs.pid]["orphan_of"]["kernel_id"] == kernel_id
            body = await refused(jp_fetch, theirs.pid, 403)
            assert body["code"] == "not_yours" and "belongs to another user" in body["message"], body
            assert theirs.is_running()

        answer = json.loads((await kill(jp_fetch, mine.pid)).body)
        assert answer["signals"] == ["SIGTERM"] and answer["ended"] and answer["freed_bytes"] == GIB, answer
        assert answer["orphan_of"]["notebook_path"] == "train.ipynb"
        assert not mine.is_running() or mine.status() == psutil.STATUS_ZOMBIE
        assert (await refused(jp_fetch, mine.pid, 404))["code"] == "not_found"
    finally:
        for child in children.values():
            if child.is_running():
                child.kill()
