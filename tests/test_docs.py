"""The documents that describe the contract stay in step with the code."""
from __future__ import annotations

import json
import os
from importlib import resources
from pathlib import Path

from openapi_spec_validator import validate

from gpu_widgets.metrics.fields import SAMPLE_FIELDS
from gpu_widgets.server.app import GpuWidgets

ROOT = Path(__file__).resolve().parents[1]


def test_every_sample_field_is_documented():
    text = (ROOT / "docs" / "fields.md").read_text()
    missing = [f.name for f in SAMPLE_FIELDS if f"`{f.name}`" not in text]
    assert missing == []


def test_every_server_setting_is_documented_with_help():
    text = (ROOT / "docs" / "server.md").read_text()
    # The app's own settings and those of the mixins it is built from (the cluster view's).
    traits = {}
    for cls in GpuWidgets.__mro__:
        if cls.__module__.startswith("gpu_widgets.") and hasattr(cls, "class_own_traits"):
            traits.update(cls.class_own_traits(config=True))
    assert {"prometheus_url", "hostname"} <= set(traits)
    assert {"interval_s", "window_s", "show_other_users_processes"} <= set(traits)
    for name, trait in traits.items():
        assert trait.help, f"GpuWidgets.{name} has no help"
        assert f"`GpuWidgets.{name}`" in text, f"GpuWidgets.{name} is not in docs/server.md"


def test_openapi_document_is_valid_and_covers_every_sample_field():
    doc = json.loads(resources.files("gpu_widgets.server").joinpath("openapi.json").read_text())
    validate(doc)
    sample = doc["components"]["schemas"]["DeviceSample"]
    assert {f.name for f in SAMPLE_FIELDS} <= set(sample["required"])


def test_readme_shows_the_two_quick_start_commands():
    text = (ROOT / "README.md").read_text()
    assert "make lab" in text and "make test" in text


def _readme_pick_call() -> str:
    """The README's pick_gpus(...) example, exactly as written there."""
    import re

    calls = re.findall(r"`(gpu_widgets\.pick_gpus\([^`]*\))`", (ROOT / "README.md").read_text())
    assert calls, "the README no longer shows a gpu_widgets.pick_gpus(...) call"
    return calls[0]


def test_the_readmes_pick_gpus_example_works_on_the_simulated_gpus():
    # Given the README's exact call, when a new user runs it in a fresh process on the demo's
    # simulated GPUs, then it picks GPUs and points CUDA at them instead of refusing.
    import subprocess
    import sys

    code = ("import json, os, warnings, gpu_widgets\nwarnings.simplefilter('ignore')\n"
            f"print(json.dumps([{_readme_pick_call()}, os.environ['CUDA_VISIBLE_DEVICES']]))")
    env = {k: v for k, v in os.environ.items() if not k.startswith(("CUDA_", "GPU_WIDGETS_SIMULATED"))}
    env["GPU_WIDGETS_BACKEND"] = "simulated"
    done = subprocess.run([sys.executable, "-c", code], cwd=ROOT, env=env, capture_output=True, text=True,
                          timeout=120)
    assert done.returncode == 0, done.stderr
    picked, visible = json.loads(done.stdout)
    assert sorted(picked) == [0, 1] and sorted(visible.split(",")) == ["0", "1"]


def test_the_readmes_pick_gpus_example_fits_the_simulated_gpus_at_every_moment():
    # The subprocess above sees one moment of the simulated 240 s cycle; this checks them all (the
    # readings are a function of the time), with pick_gpus()'s own thresholds.
    import ast

    from gpu_widgets.backends.simulated import CYCLE_S, STEP_S, SimulatedBackend

    call = ast.parse(_readme_pick_call()).body[0].value
    wanted = call.args[0].value
    gib = next(k.value.value for k in call.keywords if k.arg == "min_free_memory_gib")
    backend = SimulatedBackend()
    backend.open()
    for i in range(int(CYCLE_S / STEP_S)):
        devices = backend.read_fast(1_800_000_000.0 + i * STEP_S)
        fitting = [d for d in devices if d["memory_free_bytes"] >= gib * (1 << 30)]
        assert len(fitting) >= wanted, (i * STEP_S, [d["memory_free_bytes"] / (1 << 30) for d in devices])
