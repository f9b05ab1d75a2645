"""A Jupyter server in a pid namespace of its own, as in a container without ``--pid=host``.

``unshare --pid --fork --mount-proc`` starts it (root only): it and its kernels see their own pids,
while the fake NVML's process lists carry the pids this test sees, as the driver reports host pids.
A folder of plain files stands in for /dev (``--GpuWidgets.nvidia_device_dir``): a kernel "uses" a
GPU by holding its file and nvidia-uvm open, as a CUDA context does.
"""
from __future__ import annotations

import json
import os
import shutil
import subprocess
from pathlib import Path
from typing import Any

import pytest

from .fake_nvml import fake_nvml_env, write_config
from .lab_server import LabServer

UNSHARE = ["unshare", "--pid", "--fork", "--mount-proc"]


def unshare_works() -> str | None:
    """None when a pid namespace can be made here, else why not (the tests skip with it)."""
    if os.geteuid() != 0:
        return "making a pid namespace needs root (unshare --pid)"
    if shutil.which("unshare") is None:
        return "unshare (util-linux) is not installed"
    done = subprocess.run([*UNSHARE, "true"], capture_output=True, text=True, timeout=30)
    return None if done.returncode == 0 else f"unshare --pid failed: {done.stderr.strip()}"


def stand_in_dev(root: Path, gpus: int) -> Path:
    dev = root / "dev"
    (dev / "nvidia-caps").mkdir(parents=True)
    for name in [f"nvidia{i}" for i in range(gpus)] + ["nvidiactl", "nvidia-uvm"]:
        (dev / name).write_text("")
    for cap in (1, 2):
        (dev / "nvidia-caps" / f"nvidia-cap{cap}").write_text("")
    return dev


def contained_server(workdir: Path, lib_dir: Path, config: Path, dev: Path, gpus: dict[str, Any],
                     *options: str, app: str = "server") -> LabServer:
    write_config(config, gpus)
    env = {**fake_nvml_env(lib_dir, config), "GPU_WIDGETS_BACKEND": "nvml"}
    return LabServer(workdir, env=env, app=app, command_prefix=UNSHARE,
                     args=["--GpuWidgets.interval_s=0.2", "--GpuWidgets.slow_interval_s=0.3",
                           f"--GpuWidgets.nvidia_device_dir={dev}", *options])


def run_in_kernel(server: LabServer, kernel_id: str, code: str, timeout: float = 60) -> str:
    """Run ``code`` in one of the server's kernels (its connection file, over loopback); its stdout."""
    from jupyter_client import BlockingKernelClient

    kc = BlockingKernelClient()
    kc.load_connection_file(str(server.workdir / "runtime" / f"kernel-{kernel_id}.json"))
    kc.start_channels()
    try:
        kc.wait_for_ready(timeout=timeout)
        out: list[str] = []
        reply = kc.execute_interactive(code, timeout=timeout,
                                       output_hook=lambda msg: out.append(msg["content"].get("text", "")))
        if reply["content"]["status"] != "ok":
            raise AssertionError(f"kernel code failed: {reply['content']}")
        return "".join(out)
    finally:
        kc.stop_channels()


def hold(dev: Path, *names: str) -> str:
    """Kernel code that keeps the stand-in device files open and prints the kernel's own pid."""
    paths = [str(dev / n) for n in names]
    return f"import os\n_held = [open(p) for p in {paths!r}]\nprint(os.getpid())"


def child_holding(dev: Path, *names: str) -> str:
    """Kernel code that starts a child, in a session of its own (it outlives the kernel), holding the files."""
    paths = [str(dev / n) for n in names]
    script = f"import time; _h = [open(p) for p in {paths!r}]; time.sleep(600)"
    return ("import subprocess, sys\n"
            f"_child = subprocess.Popen([sys.executable, '-c', {script!r}], start_new_session=True)\n"
            "print(_child.pid)")


def devices(server: LabServer) -> list[dict[str, Any]]:
    return server.api("samples/latest")["devices"]


def needs_namespace() -> None:
    why = unshare_works()
    if why is not None:
        pytest.skip(why)


def dump(obj: Any) -> str:
    return json.dumps(obj, indent=1)[:3000]
