"""free_gpu_memory() in a real IPython shell: what a failed cell keeps (its traceback's frames,
sys.last_*, IPython's %debug traceback, cached outputs holding tensors) is dropped and really
freed (the process's RSS falls), the user's own names are never touched but named."""
from __future__ import annotations

import gc

import psutil
import pytest
from IPython.testing.globalipapp import get_ipython

torch = pytest.importorskip("torch")

from gpu_widgets.memory.freeing import FreeReport, free_gpu_memory  # noqa: E402

ip = get_ipython()
MIB = 1 << 20


def rss() -> int:
    gc.collect()
    return psutil.Process().memory_info().rss


def test_a_failed_cells_tensor_is_freed_and_the_users_names_are_not(capsys):
    # Given a cell whose step failed while its frame held a 512 MiB tensor, and a name of the user's
    ip.run_cell("import torch\nkept = torch.ones(64 * 1024 * 1024)\n"
                "def step():\n    batch = torch.ones(128 * 1024 * 1024)\n    raise ValueError('step 3 failed')\n"
                "step()", store_history=False)
    capsys.readouterr()
    held = rss()
    # When the memory is freed
    report = free_gpu_memory()
    # Then the tensor is gone, the process gave the memory back, and the report says so
    assert isinstance(report, FreeReport)
    assert held - rss() >= 400 * MIB
    assert report.tensor_bytes_freed == 512 * MIB and report.rss_freed >= 400 * MIB
    assert "sys.last_value" in report.dropped and any("traceback frame" in d for d in report.dropped)
    # the user's own tensor is alive, and named as not touched
    assert ip.user_ns["kept"].numel() == 64 * 1024 * 1024
    assert report.not_touched[0] == {"name": "kept", "bytes": 256 * MIB, "what": "a tensor on cpu"}
    text = str(report)
    assert "tensors freed: 512.0 MiB" in text and "not touched: `kept` still holds 256.0 MiB (a tensor on cpu)" in text
    assert "<li>not touched: `kept` still holds 256.0 MiB" in report._repr_html_()


def test_cached_outputs_holding_tensors_are_dropped_and_others_kept():
    result = ip.run_cell("import torch\ntorch.zeros(32 * 1024 * 1024)", store_history=True)  # 128 MiB, cached in Out and _
    assert result.success
    del result  # holds the cell's value too
    n = ip.execution_count - 1
    ip.run_cell("'a plain value'", store_history=True)
    plain = ip.execution_count - 1
    assert ip.user_ns["Out"][n].numel() == 32 * 1024 * 1024
    report = free_gpu_memory()
    assert n not in ip.user_ns["Out"] and ip.user_ns["Out"][plain] == "a plain value"
    assert f"Out[{n}]" in report.dropped and report.tensor_bytes_freed == 128 * MIB


def test_with_nothing_to_free_it_says_so():
    free_gpu_memory()
    report = free_gpu_memory()
    assert report.dropped == [] and report.tensor_bytes_freed == 0
    assert str(report).startswith("gpu-widgets: free_gpu_memory: nothing held by a failed cell to drop")


def test_the_magic_and_the_package_name_free_the_same_way(capsys):
    import gpu_widgets

    assert gpu_widgets.free_gpu_memory is free_gpu_memory
    ip.run_line_magic("load_ext", "gpu_widgets")
    ip.run_cell("import torch\ndef step():\n    x = torch.ones(1024 * 1024)\n    raise KeyError('k')\nstep()",
                store_history=False)
    capsys.readouterr()
    ip.run_line_magic("gpu_free", "")
    out = capsys.readouterr().out
    assert out.startswith("gpu-widgets: free_gpu_memory: dropped:") and "tensors freed: 4.0 MiB" in out
    from IPython.core.error import UsageError

    with pytest.raises(UsageError, match="%gpu_free takes no options"):
        ip.run_line_magic("gpu_free", "--all")


@pytest.mark.parametrize("fake_nvml_config", [{"gpus": [{"memory_total": 80 << 30, "memory_used": 12 << 30}]}])
def test_a_process_using_cuda_is_told_its_gpu_memory_before_and_after_from_nvml(in_process_fake_nvml, monkeypatch):
    # Given this process on the fake driver holding 10 GiB of GPU 0 (NVML's process list), and
    # PyTorch's CUDA calls answering as a GPU machine's do (this machine has none)
    from gpu_widgets.sampling import sampler as sampler_module

    monkeypatch.setenv("GPU_WIDGETS_BACKEND", "nvml")
    monkeypatch.setattr(sampler_module, "_shared", None)
    import os

    gib = 1 << 30
    held = {"reserved": 10 * gib}
    in_process_fake_nvml({"gpus": [{"memory_total": 80 * gib, "memory_used": 12 * gib,
                                    "procs": [(os.getpid(), 10 * gib)]}]})

    def empty_cache():  # the allocator gives its cached blocks back: NVML sees 2 GiB left
        held["reserved"] = 2 * gib
        in_process_fake_nvml({"gpus": [{"memory_total": 80 * gib, "memory_used": 4 * gib,
                                        "procs": [(os.getpid(), 2 * gib)]}]})

    monkeypatch.setattr(torch.cuda, "is_initialized", lambda: True)
    monkeypatch.setattr(torch.cuda, "device_count", lambda: 1)
    monkeypatch.setattr(torch.cuda, "memory_reserved", lambda d=0: held["reserved"])
    monkeypatch.setattr(torch.cuda, "memory_allocated", lambda d=0: 1 * gib)
    monkeypatch.setattr(torch.cuda, "mem_get_info", lambda d=0: (80 * gib - held["reserved"] - 2 * gib, 80 * gib))
    monkeypatch.setattr(torch.cuda, "empty_cache", empty_cache)
    try:
        report = free_gpu_memory()
    finally:
        shared = sampler_module._shared
        if shared is not None:
            shared.stop()
    # Then NVML's figure for this process, before and after, is in the report with the allocator's
    assert report.nvml == [{"gpu": 0, "before": 10 * gib, "after": 2 * gib}], report
    assert report.gpu == [{"device": 0, "reserved_before": 10 * gib, "reserved_after": 2 * gib,
                           "free_before": 68 * gib, "free_after": 76 * gib}]
    assert "GPU 0 (NVML): this process held 10.0 GiB → 2.0 GiB" in str(report)
