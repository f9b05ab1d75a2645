"""%gpuwatch / %%gpuwatch driven through a real IPython shell, and the cell hooks of TrainingMonitor."""
from __future__ import annotations

import json
import time

import pytest
from IPython.core.error import UsageError
from IPython.testing.globalipapp import get_ipython

from gpu_widgets.sampling import sampler as sampler_module
from gpu_widgets.magic.magics import GpuWatchMagics

from .widget_helpers import HangingBackend, run_dir, shared_simulated, simulated_sampler, wait_until  # noqa: F401

ip = get_ipython()
ip.run_line_magic("load_ext", "gpu_widgets")


def run(cell: str):
    return ip.run_cell(cell, store_history=False)


def test_cell_magic_runs_the_cell_and_prints_a_summary(shared_simulated, capsys):
    result = run("%%gpuwatch --interval 0.1 --quiet\nimport time\ntime.sleep(0.6)\nanswer = 41\nanswer + 1")
    out = capsys.readouterr().out
    assert result.success and result.result == 42 and ip.user_ns["answer"] == 41
    head, *gpu_lines = out.strip().splitlines()
    assert head.startswith("%%gpuwatch: cell ran 0.6 s · SIMULATED GPUs (not real devices) ·")
    assert "(every 0.1 s)" in head
    assert gpu_lines[0].startswith("  GPU 0 Simulated NVIDIA H100 80GB HBM3: busy mean")
    assert "memory peak" in gpu_lines[0] and "power peak" in gpu_lines[0]
    data = ip.user_ns["_gpuwatch"]
    assert data["backend"] == "simulated" and [g["index"] for g in data["gpus"]] == [0, 1]
    assert data["gpus"][0]["samples"] >= 4
    # the kernel's sampling interval is back to what it was, and the sampler is released
    assert sampler_module._shared.interval_s == 1.0


def test_cell_exception_is_reraised_unchanged_after_the_summary(shared_simulated, capsys):
    result = run("%%gpuwatch --quiet\nerr = ValueError('out of patience')\nraise err")
    out = capsys.readouterr().out
    assert result.error_in_exec is ip.user_ns["err"]
    assert out.startswith("%%gpuwatch: cell ran")


def test_cell_keyboard_interrupt_is_reraised_unchanged(shared_simulated, capsys):
    result = run("%%gpuwatch --quiet\nstop = KeyboardInterrupt()\nraise stop")
    assert result.error_in_exec is ip.user_ns["stop"]
    assert "%%gpuwatch: cell ran" in capsys.readouterr().out


@pytest.mark.parametrize(
    ("line", "words"),
    [
        ("%gpuwatch --bogus", "unrecognized arguments: --bogus"),
        ("%gpuwatch --interval abc", "argument --interval: expected a number of seconds, got 'abc'"),
        ("%gpuwatch --interval 0", "argument --interval: must be from 0.1 to 60 seconds, got '0'"),
        ("%gpuwatch --window 5", "argument --window: must be from 10 to 3600 seconds"),
        ("%gpuwatch --gpus first", "expected auto, all or GPU indices such as 0,1; got 'first'"),
        ("%gpuwatch start", "unknown action 'start': the only one is stop (%gpuwatch stop)"),
        ("%gpuwatch --gpus '0", "cannot split the options \"--gpus '0\": No closing quotation"),
        ("%%gpuwatch --gpus 0,x\nran = True", "expected auto, all or GPU indices"),
        ("%%gpuwatch stop\nran = True", "'stop' is for the line magic"),
    ],
)
def test_bad_options_print_usage_without_traceback(line, words, capsys):
    ip.user_ns.pop("ran", None)
    result = run(line)
    captured = capsys.readouterr()
    text = captured.out + captured.err
    assert isinstance(result.error_in_exec, UsageError)
    assert words in text
    assert "usage: %gpuwatch [-h] [--window SECONDS] [--interval SECONDS]" in text
    assert "--gpus auto|all|0,1" in text and "Traceback" not in text
    assert "ran" not in ip.user_ns  # a cell with bad options does not run
    assert "--quiet               %%gpuwatch: no live charts, only the summary" in text  # and the options


OPTION_HELP = [
    "-h, --help            show this help and do nothing else",
    "--window SECONDS      how much history the charts show (10-3600, default",
    "--interval SECONDS    sampling interval for this kernel (0.1-60; default:",
    "which GPUs: the ones this kernel uses (auto, default),",
    "--quiet               %%gpuwatch: no live charts, only the summary",
    "stop                  stop the live dashboard (line magic only)",
    "%gpuwatch --gpus all --window 600",  # the examples
]


def test_help(capsys):
    ip.user_ns.pop("ran", None)
    result = run("%gpuwatch --help")
    out = capsys.readouterr().out
    assert result.success and "Watch the GPUs" in out
    assert [line for line in OPTION_HELP if line not in out] == []
    result = run("%%gpuwatch --help\nran = True")  # help only: the cell does not run
    assert result.success and "Watch the GPUs" in capsys.readouterr().out and "ran" not in ip.user_ns


def test_question_mark_shows_the_usage_and_every_option():
    # What %gpuwatch? pages: magic_arguments turns the parser's help into the magic's docstring.
    text = ip.object_inspect_text("%gpuwatch")
    assert "%gpuwatch [-h] [--window SECONDS] [--interval SECONDS]" in text
    assert "Watch the GPUs: a live dashboard (%gpuwatch) or a summary of one cell (%%gpuwatch)." in text
    assert [line for line in OPTION_HELP if line not in text] == []


def test_options_are_parsed_with_their_defaults():
    parse = GpuWatchMagics.gpuwatch.parser.parse_argstring
    args = parse("")
    assert (args.action, args.window, args.interval, args.gpus, args.quiet, args.help) == (None, 300.0, None, "auto", False, False)
    args = parse("stop --window 3600 --interval 0.1 --gpus 2,0, --quiet")
    assert (args.action, args.window, args.interval, args.gpus, args.quiet) == ("stop", 3600.0, 0.1, frozenset({0, 2}), True)


def test_line_magic_without_a_front_end_prints_the_gpus(shared_simulated, capsys):
    result = run("%gpuwatch")
    out = capsys.readouterr().out
    assert result.success and "SIMULATED GPUs" in out and "Simulated NVIDIA H100" in out
    assert GpuWatchMagics.dashboard is None


def test_line_magic_without_a_front_end_says_when_the_sampler_is_stuck(monkeypatch, capsys):
    backend = HangingBackend({"utilization_gpu_percent": 77})
    stuck = sampler_module.Sampler(backend, interval_s=0.1).start()
    monkeypatch.setattr(sampler_module, "_shared", stuck)
    try:
        wait_until(lambda: stuck.latest is not None)
        backend.hang.set()
        wait_until(lambda: stuck.staleness()[1])
        result = run("%gpuwatch")
        out = capsys.readouterr().out
        assert result.success
        assert "STALE: no new sample for" in out and "HangingBackend.read_fast" in out and "has not returned" in out
        assert "77%" in out  # the last sample, said to be old
    finally:
        backend.release.set()
        stuck.stop()


def test_line_magic_in_a_kernel_shows_a_live_dashboard_and_stops(shared_simulated, monkeypatch, capsys):
    monkeypatch.setattr(ip, "kernel", object(), raising=False)
    result = run("%gpuwatch --interval 0.2 --gpus 1 --window 60")
    assert result.success
    dash = GpuWatchMagics.dashboard
    try:
        assert dash is not None and dash.running and dash.window_s == 60.0
        assert sampler_module._shared.interval_s == 0.2
        deadline = time.monotonic() + 10  # the sampler thread has just started: wait for a sample
        while "waiting for the first sample" in dash.widget.children[0].value and time.monotonic() < deadline:
            time.sleep(0.05)
            dash.refresh()
        assert "GPU 1" in dash.widget.children[0].value and "GPU 0" not in dash.widget.children[0].value
    finally:
        run("%gpuwatch stop")
    assert "live dashboard stopped" in capsys.readouterr().out
    assert not dash.running and GpuWatchMagics.dashboard is None
    sampler_module._shared.interval_s = 1.0


def test_bad_backend_setting_is_reported_and_the_cell_still_runs(monkeypatch, capsys):
    monkeypatch.setenv("GPU_WIDGETS_BACKEND", "quantum")
    monkeypatch.setattr(sampler_module, "_shared", None)
    result = run("%%gpuwatch\nran = 'yes'")
    out = capsys.readouterr().out
    assert result.success and ip.user_ns["ran"] == "yes"
    assert "GPU monitoring off: GPU_WIDGETS_BACKEND='quantum' is not a backend" in out


# -- TrainingMonitor follows the cells that drive it ----------------------------------------------
def test_monitor_learns_how_its_cell_ended():
    ip.user_ns["sampler"] = simulated_sampler()
    run("from gpu_widgets import TrainingMonitor\nmon = TrainingMonitor('cells', sampler=sampler)")
    mon = ip.user_ns["mon"]
    result = run("for i in range(5):\n    mon.log(loss=1.0 / (i + 1))\nerr = RuntimeError('CUDA out of memory')\nraise err")
    assert result.error_in_exec is ip.user_ns["err"]
    assert mon.status == "failed" and mon.error is ip.user_ns["err"]
    assert "RuntimeError: CUDA out of memory" in mon.widget.children[0].value
    run("mon.log(loss=0.1)")  # the fixed loop goes on in the next cell
    assert mon.status == "idle" and mon.step == 5  # the cell ended without finish()
    run("stop = KeyboardInterrupt()\nmon.log(loss=0.05)\nraise stop")
    assert mon.status == "interrupted" and mon.error is ip.user_ns["stop"]
    run("x = 1")  # a cell that does not touch the monitor changes nothing
    assert mon.status == "interrupted"
    run("with mon:\n    mon.log(loss=0.01)")
    assert mon.status == "finished" and mon.step == 7
    # One run log across the pauses: every row once, and the final status.
    steps = [json.loads(x)["step"] for x in (mon.run_dir / "steps.jsonl").read_text().splitlines()]
    assert steps == list(range(8))
    assert json.loads((mon.run_dir / "run.json").read_text())["status"] == "finished"


def test_summary_reports_throttling_and_energy(shared_simulated, monkeypatch, capsys):
    monkeypatch.setenv("GPU_WIDGETS_SIMULATED_FAULTS", "throttle:0@0:sw_power_cap")
    result = run("%%gpuwatch --interval 0.1 --quiet --gpus 0\nimport time\ntime.sleep(0.6)")
    out = capsys.readouterr().out
    assert result.success
    gpu0 = [line for line in out.splitlines() if line.startswith("  GPU 0")]
    assert len(gpu0) == 1 and "GPU 1" not in out  # --gpus 0
    assert "throttled: power cap" in gpu0[0] and "energy" in gpu0[0] and "temperature peak" in gpu0[0]
    assert ip.user_ns["_gpuwatch"]["gpus"][0]["throttled_s"]["sw_power_cap"] > 0.2
