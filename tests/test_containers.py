"""GPU processes named inside a container: a real Jupyter server and kernels in a pid namespace of
their own, the fake NVML listing the pids of the namespace outside (host pids), stand-in device
files held by the kernels. Skipped, with the reason, where no pid namespace can be made."""
from __future__ import annotations

import time

import pytest

from gpu_widgets.backends.pid_match import MEMORY_UNKNOWN, NOT_TOLD, OUTSIDE
from gpu_widgets.server.orphan_watch import WATCH_S

from .container_fixtures import (child_holding, contained_server, devices, dump, hold, needs_namespace,
                                 run_in_kernel, stand_in_dev)
from .fake_nvml import write_config

pytestmark = [pytest.mark.integration, pytest.mark.slow]  # servers in a pid namespace, 10-20 s each

GIB = 1 << 30


def wait_for(check, what: str, server, timeout: float = 30.0):
    deadline = time.monotonic() + timeout
    while True:
        found = check()
        if found:
            return found
        assert time.monotonic() < deadline, f"{what}:\n{dump(devices(server))}\n{server.log_tail()}"
        time.sleep(0.2)


def processes(server, gpu: int) -> list[dict]:
    """The processes page of one GPU (with kernel, notebook and orphan_of)."""
    return server.api("processes", gpu=gpu)["devices"][0]["processes"] or []


def listed_when(server, gpu: int, ok) -> list[dict] | None:
    found = processes(server, gpu)
    return found if ok(found) else None


@pytest.fixture
def namespace() -> None:
    needs_namespace()


def test_kernels_in_a_container_are_matched_by_their_device_files(namespace, fake_nvml_lib, tmp_path):
    dev = stand_in_dev(tmp_path, 2)
    conf = tmp_path / "nvml.conf"
    with contained_server(tmp_path / "srv", fake_nvml_lib, conf, dev, {"gpus": [{}, {}]}) as srv:
        (sa, outer_a), (sb, outer_b) = srv.start_notebook_kernel("a.ipynb"), srv.start_notebook_kernel("b.ipynb")
        a, b = sa["kernel"]["id"], sb["kernel"]["id"]
        inner_a = int(run_in_kernel(srv, a, hold(dev, "nvidiactl", "nvidia-uvm", "nvidia0")))
        inner_b = int(run_in_kernel(srv, b, hold(dev, "nvidiactl", "nvidia-uvm", "nvidia1")))
        assert inner_a != outer_a and inner_b != outer_b  # the namespace is real

        # One kernel per GPU: each entry is the kernel's local process, with the driver's memory
        def write_gpus(gpus: list[dict]) -> None:
            write_config(conf, {"gpus": gpus})

        write_gpus([{"util_gpu": 50, "procs": [(outer_a, 3 * GIB)]}, {"procs": [(outer_b, 5 * GIB)]}])
        (pa,) = wait_for(lambda: [p for p in processes(srv, 0) if p["pid"] == inner_a], "kernel a not matched", srv)
        assert (pa["matched_by"], pa["nvml_pid"], pa["used_memory_bytes"]) == ("device_files", outer_a, 3 * GIB)
        assert (pa["kernel_id"], pa["notebook_path"]) == (a, "a.ipynb") and "python" in pa["name"]
        (pb,) = processes(srv, 1)
        assert (pb["pid"], pb["used_memory_bytes"], pb["kernel_id"]) == (inner_b, 5 * GIB, b)
        status = srv.get_json("gpu-widgets/api/v1/status")
        assert "reports host pids" in status["processes_note"] and "--pid=host" in status["processes_note"]
        assert "hostPID: true" in status["processes_note"], status

        # Two kernels on one GPU and two entries of different sizes: listed, memory unknown, never a guess
        run_in_kernel(srv, b, f"_held.append(open({str(dev / 'nvidia0')!r}))")
        write_gpus([{"procs": [(outer_a, 3 * GIB), (outer_b, GIB)]}, {"procs": [(outer_b, 5 * GIB)]}])
        listed = wait_for(lambda: listed_when(srv, 0, lambda ps: len(ps) == 4), "not four entries", srv)
        local = {p["pid"]: p for p in listed if p["pid"] is not None}
        assert set(local) == {inner_a, inner_b}
        for p in local.values():
            assert p["used_memory_bytes"] is None and p["unavailable"]["used_memory_bytes"] == MEMORY_UNKNOWN, p
            assert p["matched_by"] == "device_files" and p["kernel_id"] in (a, b)
        apart = sorted((p["nvml_pid"], p["used_memory_bytes"]) for p in listed if p["pid"] is None)
        assert apart == sorted([(outer_a, 3 * GIB), (outer_b, GIB)])
        assert all(p["unavailable"]["name"] == NOT_TOLD and p["matched_by"] is None for p in listed if p["pid"] is None)

        # The same sizes decide it: each process gets its figure, which host pid is which stays unknown
        write_gpus([{"procs": [(outer_a, 2 * GIB), (outer_b, 2 * GIB)]}, {"procs": [(outer_b, 5 * GIB)]}])
        listed = wait_for(lambda: listed_when(srv, 0, lambda ps: len(ps) == 2 and ps[0]["used_memory_bytes"] == 2 * GIB), "equal sizes not matched", srv)
        assert {(p["pid"], p["used_memory_bytes"], p["nvml_pid"]) for p in listed} == \
            {(inner_a, 2 * GIB, None), (inner_b, 2 * GIB, None)}

        # Another container's process on a GPU none of ours holds: outside, with its memory
        run_in_kernel(srv, a, "_held = [f for f in _held if not f.name.endswith('nvidia0')]")
        run_in_kernel(srv, b, "_held = [f for f in _held if not f.name.endswith('nvidia0')]")
        write_gpus([{"procs": [(999_999, 7 * GIB)]}, {"procs": [(outer_b, 5 * GIB)]}])
        (other,) = wait_for(lambda: listed_when(srv, 0, lambda ps: [p["nvml_pid"] for p in ps] == [999_999]),
                            "no outside entry", srv)
        assert other["pid"] is None and other["used_memory_bytes"] == 7 * GIB and other["kernel_id"] is None
        assert other["unavailable"]["name"] == OUTSIDE and other["matched_by"] is None


def test_an_orphan_and_a_mig_instance_in_a_container(namespace, fake_nvml_lib, tmp_path):
    dev = stand_in_dev(tmp_path, 2)
    conf = tmp_path / "nvml.conf"
    mig = {"mig_current": 1, "mig_devices": [(1, 0, 0, 20 * GIB), (2, 0, 0, 20 * GIB)]}
    with contained_server(tmp_path / "srv", fake_nvml_lib, conf, dev, {"gpus": [mig, {}]}) as srv:
        (sa, outer_a), (sd, _) = srv.start_notebook_kernel("mig.ipynb"), srv.start_notebook_kernel("leaves.ipynb")
        a, d = sa["kernel"]["id"], sd["kernel"]["id"]
        inner_a = int(run_in_kernel(srv, a, hold(dev, "nvidia-uvm", "nvidia0", "nvidia-caps/nvidia-cap2")))
        inner_child = int(run_in_kernel(srv, d, child_holding(dev, "nvidia-uvm", "nvidia1")))
        # The child's pid outside the namespace: the one process there running its script
        import psutil
        outer_child = next(p.pid for p in psutil.Process(srv.proc.pid).children(recursive=True)
                           if "time.sleep(600)" in " ".join(p.cmdline()))
        write_config(conf, {"gpus": [{**mig, "procs": [(outer_a, 4 * GIB, 2, 0)]},
                                     {"procs": [(outer_child, GIB)]}]})

        # MIG: the kernel is matched on its GPU, and the instance NVML names for it carries its local pid
        wait_for(lambda: [p for p in processes(srv, 0) if p["pid"] == inner_a], "MIG kernel not matched", srv)
        instances = devices(srv)[0]["mig_instances"]
        assert [m["pids"] for m in instances] == [[], [inner_a]], dump(instances)

        # The child is the kernel's while it lives, and an orphan once its kernel is shut down
        wait_for(lambda: [p for p in processes(srv, 1) if p["pid"] == inner_child and p["kernel_id"] == d],
                 "the child is not the kernel's", srv)
        # The orphan watch notes the kernel's GPU processes on its rounds (orphan_watch.WATCH_S): let one
        # pass, with room for a loaded machine, before the kernel goes (the book is the server's own state)
        time.sleep(2 * WATCH_S + 1)
        srv.request_json("DELETE", f"api/kernels/{d}")
        (orphan,) = wait_for(lambda: [p for p in processes(srv, 1) if p.get("orphan_of")], "no orphan", srv)
        assert orphan["pid"] == inner_child and orphan["orphan_of"]["kernel_id"] == d
        assert orphan["orphan_of"]["notebook_path"] == "leaves.ipynb" and orphan["used_memory_bytes"] == GIB
        # Kill works on the local pid
        done = srv.request_json("POST", f"gpu-widgets/api/v1/processes/{inner_child}/kill")
        assert done["ended"] and done["freed_bytes"] == GIB, done


def test_the_idle_gpu_culler_works_on_the_matched_processes(namespace, fake_nvml_lib, tmp_path):
    # Culling on, as an admin turns it on; two kernels in the container, each holding a GPU's file
    from .test_kernel_culling_e2e import BOUND_S, MARGIN_S, ROUND_S, WINDOW_S

    dev = stand_in_dev(tmp_path, 2)
    conf = tmp_path / "nvml.conf"
    with contained_server(tmp_path / "srv", fake_nvml_lib, conf, dev, {"gpus": [{}, {}]},
                          f"--GpuWidgets.cull_idle_gpu_kernels_after_s={WINDOW_S:g}") as srv:
        (sa, outer_a), (sb, outer_b) = srv.start_notebook_kernel("idle.ipynb"), srv.start_notebook_kernel("shared.ipynb")
        a, b = sa["kernel"]["id"], sb["kernel"]["id"]
        inner_a = int(run_in_kernel(srv, a, hold(dev, "nvidia-uvm", "nvidia0")))
        run_in_kernel(srv, b, hold(dev, "nvidia-uvm", "nvidia1"))
        # GPU 0: kernel a alone, matched one to one, 2 GiB at 0 %. GPU 1: kernel b and another container's
        # context of another size: b's memory is unknown, so b is never culled on a guess
        write_config(conf, {"gpus": [{"util_gpu": 0, "procs": [(outer_a, 2 * GIB)]},
                                     {"util_gpu": 0, "procs": [(outer_b, 3 * GIB), (999_999, GIB)]}]})
        held_since = time.monotonic()
        wait_for(lambda: [p for p in processes(srv, 0) if p["pid"] == inner_a and p["matched_by"] == "device_files"],
                 "kernel a not matched", srv)

        def alive() -> set[str]:
            return {k["id"] for k in srv.get_json("api/kernels")}

        wait_for(lambda: a not in alive(), "kernel a not culled", srv, timeout=BOUND_S + MARGIN_S)
        assert time.monotonic() - held_since >= WINDOW_S
        (culled,) = [e for e in srv.api("kernels/events")["events"] if e["kernel_id"] == a]
        assert culled["kind"] == "culled" and culled["notebook_path"] == "idle.ipynb", culled
        assert culled["reason"].startswith("shut down after 3 s holding 2 GiB of GPU 0 unused"), culled
        # Past the bound, kernel b (memory unknown) still runs
        while time.monotonic() - held_since < BOUND_S + ROUND_S:
            time.sleep(0.5)
        assert b in alive(), srv.log_tail()
        shared = processes(srv, 1)
        assert any(p["pid"] is not None and p["kernel_id"] == b and p["used_memory_bytes"] is None for p in shared), dump(shared)
