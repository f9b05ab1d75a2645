"""free_gpu_memory() in a real IPython shell: what a failed cell keeps (its traceback's frames,
sys.last_*, IPython's %debug traceback, cached outputs holding tensors) is dropped and really
freed (the process's RSS falls), the user's own names are never touched but named."""
from __future__ import annotations

import gc

import psutil
import pytest
from IPython.testing.globalipapp import get_ipython

pytest.importorskip("torch")

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
