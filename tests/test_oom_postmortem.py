"""The out-of-memory post-mortem: its facts and cause from PyTorch's message, NVML's processes and
the allocator; other users' processes kept private; and, in a real kernel on the fake NVML with
another process holding memory on the GPU, the cell's output after a constructed OOM, the error
itself reaching the user unchanged."""
from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest

torch = pytest.importorskip("torch")

from gpu_widgets.memory.postmortem import is_oom, post_mortem  # noqa: E402

from .kernel_session import running_kernel  # noqa: E402

GIB, MIB = 1 << 30, 1 << 20
MESSAGE = ("CUDA out of memory. Tried to allocate 4.00 GiB. GPU {gpu} has a total capacity of 79.19 GiB of which "
           "1.00 GiB is free. Of the allocated memory {alloc} GiB is allocated by PyTorch, and {unalloc} GiB is "
           "reserved by PyTorch but unallocated. If reserved but unallocated memory is large try setting "
           "PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True to avoid fragmentation.")


def oom(gpu: int = 0, alloc: str = "44.00", unalloc: str = "1.00") -> BaseException:
    return torch.OutOfMemoryError(MESSAGE.format(gpu=gpu, alloc=alloc, unalloc=unalloc))


def snapshot(procs: list[dict], index: int = 0, visible: list[int] | None = None) -> dict:
    return {"cuda_visible_devices": visible, "devices": [{"index": index, "processes": procs}]}


def test_another_process_holding_the_gpu_is_the_cause_and_other_users_stay_private():
    procs = [{"pid": 4242, "used_memory_bytes": 30 * GIB, "uid": os.getuid(), "name": "python",
              "command": "python -m ipykernel_launcher -f /run/jupyter/kernel-1a2b3c4d-9999.json"},
             {"pid": 77, "used_memory_bytes": 2 * GIB, "uid": os.getuid() + 1, "name": "secret", "command": "secret"},
             {"pid": os.getpid(), "used_memory_bytes": 45 * GIB, "uid": os.getuid(), "name": "me"}]
    pm = post_mortem(oom(), snapshot(procs))
    # no Jupyter server started this test: the kernel is named by its id
    assert pm.cause == "Jupyter kernel 1a2b3c4d (pid 4242) holds 30.00 GiB of GPU 0; with the others, 32.00 GiB"
    assert pm.facts["requested_bytes"] == 4 * GIB and pm.facts["free_bytes"] == GIB
    assert pm.facts["total_bytes"] == round(79.19 * GIB) and pm.facts["allocated_bytes"] == 44 * GIB
    # this process is not one of the others; the other user's process is pid and memory only
    assert pm.facts["others"] == [
        {"pid": 4242, "used_memory_bytes": 30 * GIB, "name": "python", "kernel_id": "1a2b3c4d-9999", "notebook": None},
        {"pid": 77, "used_memory_bytes": 2 * GIB}]
    text = pm.text()
    assert "GPU 0: asked for 4.00 GiB, 1.00 GiB was free of 79.19 GiB." in text
    assert "pid 77 · another user's process (details hidden) · 2.00 GiB" in text and "secret" not in text
    assert "secret" not in pm.html() and "Out of GPU memory" in pm.html()


def test_cuda_numbers_the_gpus_it_sees_and_nvml_all_of_them():
    procs = [{"pid": 4242, "used_memory_bytes": 40 * GIB, "uid": os.getuid(), "name": "python"}]
    pm = post_mortem(oom(gpu=1), snapshot(procs, index=3, visible=[2, 3]))  # cuda:1 is NVML GPU 3
    assert pm.facts["nvml_index"] == 3 and pm.facts["others"][0]["pid"] == 4242
    assert "(pid 4242, python) holds 40.00 GiB of GPU 1" in pm.cause


def test_fragmentation_when_the_reserved_but_unallocated_memory_would_have_held_the_request():
    pm = post_mortem(oom(alloc="60.00", unalloc="12.00"), snapshot([]))
    assert pm.cause == ("fragmentation: PyTorch holds 12.00 GiB reserved but unallocated, enough for the "
                        "4.00 GiB asked for, but not in one piece")
    assert any("PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True" in line for line in pm.lines)


def test_fragmentation_is_the_first_sentence_even_with_others_on_the_gpu():
    # Another process holds 30 GiB, yet the 12 GiB PyTorch reserved would have held the 4 GiB asked
    procs = [{"pid": 4242, "used_memory_bytes": 30 * GIB, "uid": os.getuid(), "name": "python"}]
    old_form = torch.OutOfMemoryError("CUDA out of memory. Tried to allocate 4.00 GiB (GPU 0; 79.19 GiB total "
                                      "capacity; 30.00 GiB already allocated; 1.00 GiB free; 42.00 GiB reserved "
                                      "in total by PyTorch)")  # reserved - allocated: 12 GiB
    for exc in (oom(alloc="30.00", unalloc="12.00"), old_form):
        text = post_mortem(exc, snapshot(procs)).text().splitlines()
        assert text[0] == ("gpu-widgets: out of memory — fragmentation: PyTorch holds 12.00 GiB reserved but "
                           "unallocated, enough for the 4.00 GiB asked for, but not in one piece")
        advice = next(i for i, line in enumerate(text) if "expandable_segments:True" in line)
        assert advice > 0 and "  Also on GPU 0: pid 4242 · python · 30.00 GiB." in text[1:advice]
    # Reserved-but-unallocated short of the request is not fragmentation: the other process is the cause
    assert post_mortem(oom(alloc="30.00", unalloc="3.00"), snapshot(procs)).cause.startswith("another process")


def test_without_the_request_size_fragmentation_is_not_claimed():
    procs = [{"pid": 4242, "used_memory_bytes": 30 * GIB, "uid": os.getuid(), "name": "python"}]
    unsized = torch.OutOfMemoryError("CUDA out of memory. GPU 0 has a total capacity of 79.19 GiB of which 1.00 GiB "
                                     "is free. Of the allocated memory 30.00 GiB is allocated by PyTorch, and 12.00 "
                                     "GiB is reserved by PyTorch but unallocated.")
    pm = post_mortem(unsized, snapshot(procs))
    assert pm.facts["requested_bytes"] is None
    assert pm.cause == "another process (pid 4242, python) holds 30.00 GiB of GPU 0"  # as before
    assert any("12.00 GiB is reserved but unallocated: PYTORCH_CUDA_ALLOC_CONF" in line for line in pm.lines)
    assert post_mortem(unsized, snapshot([])).cause.startswith("this process's own tensors fill the GPU")


def test_its_own_tensors_and_the_batch_that_would_have_fit():
    pm = post_mortem(oom(alloc="74.00"), snapshot([]), batch_size=64, fixed_bytes=10 * GIB)
    # capacity 74 + 1 + 1 GiB, less a 10 % margin and the 10 GiB fixed: 58.1 GiB; 68 GiB per 64 samples
    assert pm.fits_batch == 54
    assert pm.cause == ("this process's own tensors fill the GPU: what this step needed does not fit; "
                        "the batch that fits is about 54 (it was 64)")


def test_a_request_larger_than_the_gpu_is_said_so_and_simulated_processes_are_marked():
    big = torch.OutOfMemoryError("CUDA out of memory. Tried to allocate 32.00 TiB. GPU 0 has a total capacity of "
                                 "79.19 GiB of which 61.50 GiB is free.")
    procs = [{"pid": 4200000, "used_memory_bytes": 26 * GIB, "uid": os.getuid(), "name": "python"}]
    pm = post_mortem(big, {**snapshot(procs), "backend": "simulated"})
    assert pm.cause.startswith("the step asked for 32.00 TiB, more than all of GPU 0's 79.19 GiB")
    assert "pid 4200000 · python · 26.00 GiB (a SIMULATED process: these GPUs are not real)." in pm.text()


def test_a_message_in_no_known_form_still_gives_the_rest():
    procs = [{"pid": 4242, "used_memory_bytes": 30 * GIB, "uid": os.getuid(), "name": "python"}]
    pm = post_mortem(torch.OutOfMemoryError("out of memory"), snapshot(procs))
    assert pm.facts["requested_bytes"] is None and pm.facts["gpu"] is None and pm.facts["others"] == []
    assert pm.cause.startswith("this process's own tensors")
    assert "the GPU: asked for unknown" in pm.text()
    assert is_oom(torch.cuda.OutOfMemoryError("x")) and not is_oom(RuntimeError("CUDA out of memory"))


KERNEL_CELLS = [
    "%load_ext gpu_widgets",
    textwrap.dedent("""
        import torch
        err = torch.OutOfMemoryError("CUDA out of memory. Tried to allocate 2.00 GiB. GPU 0 has a total capacity of "
            "80.00 GiB of which 512.00 MiB is free. Of the allocated memory 40.00 GiB is allocated by PyTorch, and "
            "1.00 GiB is reserved by PyTorch but unallocated.")
        raise err
    """),
    "print(type(err).__name__, sys.last_value is err if 'sys' in dir() else __import__('sys').last_value is err)",
]


def execute(kc, cells: list[str]) -> list[list[dict]]:
    """Each cell's iopub messages, run one after the other by the kernel client ``kc``."""
    outputs = []
    for code in cells:
        msg_id = kc.execute(code)
        got = []
        while True:
            msg = kc.get_iopub_msg(timeout=60)
            if msg["parent_header"].get("msg_id") != msg_id:
                continue
            if msg["msg_type"] == "status" and msg["content"]["execution_state"] == "idle":
                break
            got.append({"type": msg["msg_type"], **msg["content"]})
        outputs.append(got)
    return outputs


def run_kernel(env: dict, cells: list[str], cwd: str) -> list[list[dict]]:
    with running_kernel(env, cwd) as (_, kc):
        return execute(kc, cells)


@pytest.mark.integration
def test_in_a_real_kernel_the_cell_shows_the_post_mortem_after_its_error(fake_driver, tmp_path):
    # Given another process holding 30 GiB of GPU 0 (a real process of ours, on the fake driver)
    other = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(120)"])
    try:
        fake_driver.write({"gpus": [{"memory_total": 80 * GIB, "memory_used": 75 * GIB, "procs": [(other.pid, 30 * GIB)]}]})
        env = fake_driver.env(GPU_WIDGETS_BACKEND="nvml", GPU_WIDGETS_RUN_DIR=str(tmp_path / "runs"))
        load, failed, after = run_kernel(env, KERNEL_CELLS, str(tmp_path))
    finally:
        other.kill()
    # Then the error reached the user unchanged (IPython's own traceback, sys.last_value is it)
    errors = [m for m in failed if m["type"] == "error"]
    assert [e["ename"] for e in errors] == ["OutOfMemoryError"]
    assert "OutOfMemoryError True" in "".join(m.get("text", "") for m in after)
    # and after it the post-mortem: asked and free, the other process, the cause, the button
    shown = [m for m in failed if m["type"] == "display_data"]
    assert len(shown) == 1, failed
    data = shown[0]["data"]
    text = data["text/plain"]
    assert f"another process (pid {other.pid}, python) holds 30.00 GiB of GPU 0" in text
    assert "GPU 0: asked for 2.00 GiB, 512 MiB was free of 80.00 GiB." in text
    assert "application/vnd.jupyter.widget-view+json" in data and "Out of GPU memory" in data["text/html"]
    assert failed.index(errors[0]) < failed.index(shown[0])  # after the traceback


@pytest.mark.integration
def test_under_a_jupyter_server_another_kernel_is_named_by_its_notebook(fake_driver, tmp_path):
    from jupyter_client import BlockingKernelClient

    from .lab_server import fake_nvml_lab

    # Given a real JupyterLab (token auth on) whose notebook holder.ipynb holds 30 GiB of GPU 0
    lab = fake_nvml_lab(tmp_path / "lab", fake_driver)
    lab.extra_env["GPU_WIDGETS_RUN_DIR"] = str(tmp_path / "runs")
    with lab:
        _, holder = lab.start_notebook_kernel("holder.ipynb")
        fake_driver.write({"gpus": [{"memory_total": 80 * GIB, "memory_used": 75 * GIB, "procs": [(holder, 30 * GIB)]}]})
        # when the notebook trainer.ipynb runs out of memory
        trainer, _ = lab.start_notebook_kernel("trainer.ipynb")
        kc = BlockingKernelClient(connection_file=str(lab.workdir / "runtime" / f"kernel-{trainer['kernel']['id']}.json"))
        kc.load_connection_file()
        kc.start_channels()
        try:
            kc.wait_for_ready(timeout=60)
            _, failed = execute(kc, KERNEL_CELLS[:2])
        finally:
            kc.stop_channels()
    # then its post-mortem names the other notebook, asked of the server that started the kernel
    text = "".join(m["data"]["text/plain"] for m in failed if m["type"] == "display_data")
    assert f"the notebook holder.ipynb (pid {holder}) holds 30.00 GiB of GPU 0" in text, failed
    assert f"Also on GPU 0: pid {holder} · the notebook holder.ipynb · 30.00 GiB." in text


class _Sessions(BaseHTTPRequestHandler):
    """A stand-in Jupyter server's sessions API: the answer the test put on the class, if the token is right."""
    answer: bytes = b"[]"

    def do_GET(self):  # noqa: N802 (http.server's name)
        ok = self.path == "/api/sessions" and self.headers.get("Authorization") == "token t0ken"
        self.send_response(200 if ok else 403)
        self.end_headers()
        self.wfile.write(self.answer if ok else b"{}")

    def log_message(self, *args):
        pass


@pytest.fixture
def sessions_server(tmp_path, monkeypatch):
    """A server info file naming this process's parent (an ancestor, as a kernel's server is) and a
    loopback server behind it; yields a function that sets its answer."""
    httpd = ThreadingHTTPServer(("127.0.0.1", 0), _Sessions)
    thread = threading.Thread(target=httpd.serve_forever, daemon=True)
    thread.start()
    runtime = tmp_path / "runtime"
    runtime.mkdir()
    (runtime / f"jpserver-{os.getppid()}.json").write_text(json.dumps(
        {"pid": os.getppid(), "url": f"http://127.0.0.1:{httpd.server_port}/", "token": "t0ken"}))
    monkeypatch.setenv("JUPYTER_RUNTIME_DIR", str(runtime))
    monkeypatch.setenv("HTTP_PROXY", "http://127.0.0.1:9")  # never used for the server's own address

    def answer(body: bytes) -> None:
        _Sessions.answer = body

    yield answer
    httpd.shutdown()
    httpd.server_close()


def test_the_notebooks_of_kernels_come_from_the_server_and_a_bad_answer_leaves_the_ids(sessions_server):
    from gpu_widgets.memory.kernel_notebooks import MAX_BYTES, notebook_paths

    good = [{"path": "a/holder.ipynb", "kernel": {"id": "k1"}}, {"path": "other.ipynb", "kernel": {"id": "k9"}},
            {"path": 7, "kernel": {"id": "k2"}}, {"kernel": "k3"}, "junk", {"path": "x" * 5000, "kernel": {"id": "k4"}}]
    sessions_server(json.dumps(good).encode())
    paths = notebook_paths(["k1", "k2", "k3", "k4"])
    assert paths == {"k1": "a/holder.ipynb", "k4": "x" * 1024}  # only those asked; odd entries skipped; bounded
    for bad in (b"not json", b'{"path": "a"}', b"[" * 100_000, b"[" + b" " * MAX_BYTES + b"]"):
        sessions_server(bad)
        assert notebook_paths(["k1"]) == {}
    procs = [{"pid": 4242, "used_memory_bytes": 30 * GIB, "uid": os.getuid(), "name": "python",
              "command": "python -m ipykernel_launcher -f /run/jupyter/kernel-1a2b3c4d-9999.json"}]
    sessions_server(json.dumps([{"path": "holder.ipynb", "kernel": {"id": "1a2b3c4d-9999"}}]).encode())
    pm = post_mortem(oom(), snapshot(procs))
    assert pm.cause == "the notebook holder.ipynb (pid 4242) holds 30.00 GiB of GPU 0"
    assert pm.facts["others"][0]["notebook"] == "holder.ipynb"


def test_a_server_that_refuses_leaves_the_kernel_id(sessions_server, monkeypatch):
    from gpu_widgets.memory.kernel_notebooks import notebook_paths

    sessions_server(b'[{"path": "holder.ipynb", "kernel": {"id": "k1"}}]')
    assert notebook_paths(["k1"]) == {"k1": "holder.ipynb"}
    info = next(Path(os.environ["JUPYTER_RUNTIME_DIR"]).glob("jpserver-*.json"))
    info.write_text(json.dumps({**json.loads(info.read_text()), "token": "wrong"}))
    assert notebook_paths(["k1"]) == {}  # 403
    info.write_text(json.dumps({**json.loads(info.read_text()), "token": ""}))
    monkeypatch.setenv("JUPYTERHUB_API_TOKEN", "t0ken")  # a single-user server's kernels have it
    assert notebook_paths(["k1"]) == {"k1": "holder.ipynb"}


def test_in_a_container_an_entry_with_no_local_process_is_named_by_its_host_pid():
    # The driver's entry that no local process was matched to (pid null): never "pid None"
    procs = [{"pid": None, "nvml_pid": 90210, "used_memory_bytes": 30 * GIB, "uid": None, "name": None,
              "matched_by": None}]
    pm = post_mortem(oom(alloc="30.00", unalloc="1.00"), snapshot(procs))
    assert "outside this container (host pid 90210)" in pm.cause and "None" not in pm.text(), pm.text()


def test_in_a_container_untold_entries_are_not_blamed_and_unknown_memory_says_why():
    # Two local kernels on the GPU (this one and a notebook), two host-pid entries the counts did not
    # tell apart: one of them may be this very process, so neither is named the cause
    from gpu_widgets.backends.pid_match import MEMORY_UNKNOWN, NOT_TOLD

    kernel = "python -m ipykernel_launcher -f /run/jupyter/kernel-1a2b3c4d-9999.json"
    procs = [{"pid": os.getpid(), "used_memory_bytes": None, "uid": os.getuid(), "name": "me",
              "unavailable": {"used_memory_bytes": MEMORY_UNKNOWN}, "matched_by": "device_files"},
             {"pid": 4242, "used_memory_bytes": None, "uid": os.getuid(), "name": "python", "command": kernel,
              "unavailable": {"used_memory_bytes": MEMORY_UNKNOWN}, "matched_by": "device_files"},
             {"pid": None, "nvml_pid": 90210, "used_memory_bytes": 30 * GIB, "uid": None, "name": None,
              "unavailable": {"name": NOT_TOLD}, "matched_by": None},
             {"pid": None, "nvml_pid": 90211, "used_memory_bytes": 15 * GIB, "uid": None, "name": None,
              "unavailable": {"name": NOT_TOLD}, "matched_by": None}]
    pm = post_mortem(oom(alloc="30.00", unalloc="1.00"), snapshot(procs))
    assert pm.cause.startswith("this process's own tensors"), pm.cause
    text = pm.text()
    assert f"pid 4242 · Jupyter kernel 1a2b3c4d · {MEMORY_UNKNOWN}" in text, text
    assert "host pid 90210, not told apart from this container's processes · 30.00 GiB" in text, text
    assert "None" not in text
    # An entry outside the container, told apart, is still the cause when it holds the GPU
    procs[2]["unavailable"] = {"name": "outside this container (the driver reports host pids)"}
    pm = post_mortem(oom(alloc="30.00", unalloc="1.00"), snapshot(procs))
    assert pm.cause.startswith("another process (outside this container (host pid 90210)) holds 30.00 GiB"), pm.cause
