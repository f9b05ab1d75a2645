"""Why a kernel died: real kernels of a real server killed from outside (with and without a fake
cgroup tree whose oom_kill counter goes up), a kernel shut down on purpose, and the endpoint through
real HTTP with auth."""
from __future__ import annotations

import asyncio
import json
import os
import signal
import time

import pytest
from tornado.httpclient import HTTPClientError

from gpu_widgets.server.kernel_events import KernelEvents, exit_words

from .api_schema import validate_response

PREFIX = ("gpu-widgets", "api", "v1")


async def start(jp_fetch, jp_serverapp, name):
    session = json.loads((await jp_fetch("api", "sessions", method="POST", body=json.dumps(
        {"path": name, "type": "notebook", "name": name, "kernel": {"name": "python3"}}))).body)
    kernel_id = session["kernel"]["id"]
    return session, kernel_id, jp_serverapp.kernel_manager.get_kernel(kernel_id).provisioner.pid


async def events(jp_fetch, **params):
    body = json.loads((await jp_fetch(*PREFIX, "kernels", "events", params=params)).body)
    validate_response("/kernels/events", body)
    return body["events"]


async def wait_for_death(jp_fetch, kernel_id, limit=30):
    deadline = time.monotonic() + limit
    while not (got := [e for e in await events(jp_fetch) if e["kernel_id"] == kernel_id]):
        assert time.monotonic() < deadline, "no event for the killed kernel"
        await asyncio.sleep(0.3)
    return got


def test_exit_words_and_since():
    assert exit_words(-signal.SIGSEGV)[0].startswith("crashed (SIGSEGV")
    assert exit_words(3) == ("exited with status 3", {"exit_code": 3, "signal": None})
    book = KernelEvents(limit=2)
    ids = [book.add("died", f"k{i}", None, "r")["id"] for i in range(3)]
    assert [e["id"] for e in book.events()] == ids[1:], "bounded"
    assert [e["id"] for e in book.events(since=ids[1])] == ids[2:]


@pytest.fixture
def fake_cgroup(tmp_path):
    root = tmp_path / "cgroup"
    root.mkdir()  # /proc/self/cgroup's path does not exist here: the root itself is read
    (root / "memory.events").write_text("low 0\nhigh 0\nmax 3\noom 1\noom_kill 0\n")
    (root / "memory.max").write_text(str(4 << 30) + "\n")
    (root / "memory.current").write_text(str(4 << 30) + "\n")
    return root


@pytest.fixture
def gw_config(fake_cgroup):
    return {"backend": "simulated", "cgroup_root": str(fake_cgroup)}


async def test_sigkill_and_the_container_memory_limit_and_a_shutdown(fake_cgroup, jp_fetch, jp_serverapp):
    _, plain, pid = await start(jp_fetch, jp_serverapp, "plain.ipynb")
    assert jp_serverapp.kernel_manager.get_kernel(plain)._restarter is not None, "the restarter's callbacks"
    _, oom, oom_pid = await start(jp_fetch, jp_serverapp, "oom.ipynb")
    session, quiet, _ = await start(jp_fetch, jp_serverapp, "quiet.ipynb")
    await asyncio.sleep(5)  # the watcher's looks before the deaths (see DeathWatcher._died)
    os.kill(pid, signal.SIGKILL)
    (event,) = await wait_for_death(jp_fetch, plain)
    assert event["kind"] == "died" and event["notebook_path"] == "plain.ipynb"
    assert "SIGKILL" in event["reason"] and event["details"]["signal"] == "SIGKILL"
    assert "memory limit" not in event["reason"]

    # The container's OOM killer: the counter goes up as the kernel dies.
    (fake_cgroup / "memory.events").write_text("low 0\nhigh 0\nmax 9\noom 2\noom_kill 1\n")
    os.kill(oom_pid, signal.SIGKILL)
    (event,) = await wait_for_death(jp_fetch, oom)
    assert "container's memory limit" in event["reason"] and "limit 4.0 GiB" in event["reason"], event
    assert event["details"]["cgroup"]["memory_max_bytes"] == 4 << 30

    await jp_fetch("api", "sessions", session["id"], method="DELETE")
    await asyncio.sleep(4)  # longer than the restarter's poll
    assert not [e for e in await events(jp_fetch) if e["kernel_id"] == quiet], "shut down on purpose"

    first = (await events(jp_fetch))[0]["id"]
    assert [e["kernel_id"] for e in await events(jp_fetch, since=str(first))] == [oom]
    with pytest.raises(HTTPClientError) as err:
        await jp_fetch(*PREFIX, "kernels", "events", headers={"Authorization": ""})
    assert err.value.code == 403
    with pytest.raises(HTTPClientError) as err:
        await jp_fetch(*PREFIX, "kernels", "events", params={"since": "soon"})
    assert err.value.code == 400
    doc = json.loads((await jp_fetch(*PREFIX, "openapi.json")).body)
    assert "/kernels/events" in doc["paths"]


@pytest.fixture
def autorestart():
    return True  # jupyter_client's default: a restarter watches each kernel


@pytest.fixture
def jp_server_config(gw_config, autorestart):
    return {"ServerApp": {"jpserver_extensions": {"gpu_widgets": True}}, "GpuWidgets": gw_config,
            "KernelManager": {"autorestart": autorestart}}


@pytest.mark.parametrize("autorestart", [False])
async def test_a_kernel_without_a_restarter_that_dies_says_why_and_once(jp_fetch, jp_serverapp):
    # Given a server whose kernels are not restarted (autorestart off: no restarter calls back)
    session, dying, pid = await start(jp_fetch, jp_serverapp, "norestart.ipynb")
    assert jp_serverapp.kernel_manager.get_kernel(dying)._restarter is None
    quiet_session, quiet, _ = await start(jp_fetch, jp_serverapp, "quiet.ipynb")
    await asyncio.sleep(3)  # the watcher's looks before the death
    # When one is killed from outside and the other shut down on purpose
    os.kill(pid, signal.SIGTERM)
    (event,) = await wait_for_death(jp_fetch, dying, limit=20)
    assert event["notebook_path"] == "norestart.ipynb" and "stopped by SIGTERM" in event["reason"], event
    await jp_fetch("api", "sessions", quiet_session["id"], method="DELETE")
    await asyncio.sleep(3)  # more looks: one event per death, none for the shutdown
    assert [e["kernel_id"] for e in await events(jp_fetch)] == [dying]


GIB = 1 << 30
NEAR_FULL = {"gpus": [{"util_gpu": 0, "memory_used": 78 * GIB}]}


@pytest.mark.parametrize("fake_nvml_config", [NEAR_FULL])
@pytest.mark.parametrize("gw_config", [{"backend": "nvml", "interval_s": 0.1, "slow_interval_s": 0.2,
                                        "cgroup_root": "/nonexistent/cgroup"}])
async def test_what_a_killed_kernel_held_on_the_gpu(in_process_fake_nvml, jp_fetch, jp_serverapp):
    _, kernel_id, pid = await start(jp_fetch, jp_serverapp, "train.ipynb")
    in_process_fake_nvml({"gpus": [{**NEAR_FULL["gpus"][0], "procs": [(pid, 2 * GIB)]}]})
    await asyncio.sleep(2.5)  # a sample lists it, then the watcher's look remembers it
    os.kill(pid, signal.SIGTERM)
    (event,) = await wait_for_death(jp_fetch, kernel_id)
    print(json.dumps(event, indent=1))
    assert "SIGTERM" in event["reason"] and "it held 2.0 GiB on GPU 0" in event["reason"], event
    assert "GPU 0 was near its memory limit" in event["reason"]
    assert event["details"]["held"]["gpu_memory_bytes"] == {"0": 2 * GIB}
    assert event["details"]["held"]["host_memory_bytes"] > 10 << 20, "a python kernel holds tens of MB"
    assert "cannot read" in event["details"]["cgroup"]["unavailable"]["oom_kill"], "the reason, not an error"
