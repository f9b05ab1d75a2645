"""The documents that describe the contract stay in step with the code."""
from __future__ import annotations

import json
import os
from importlib import resources
from pathlib import Path

import pytest

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


@pytest.mark.integration
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


def _named_tests(text: str) -> list[tuple[str, str]]:
    """(file, test) for each `test_x.py::test_y` in a document; a bare `::test_y` belongs to the file named
    last before it, as the tables write it."""
    import re
    named, last = [], None
    for m in re.finditer(r"(test_\w+\.py)?::(test_\w+)|(test_\w+\.py)", text):
        if m.group(3):
            last = m.group(3)
            continue
        last = m.group(1) or last
        if last is not None:
            named.append((last, m.group(2)))
    return named


def test_every_test_a_document_cites_exists():
    # A guarantee is only as good as the test it names: a renamed or deleted test must not leave a
    # citation behind in the docs.
    import ast
    defined: dict[str, set[str]] = {}
    for path in (ROOT / "tests").glob("test_*.py"):
        tree = ast.parse(path.read_text(encoding="utf-8"))
        defined[path.name] = {n.name for n in ast.walk(tree)
                              if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef))}
    missing = []
    for doc in [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]:
        for file, test in _named_tests(doc.read_text(encoding="utf-8")):
            if file not in defined:
                missing.append(f"{doc.name}: {file} (no such test file)")
            elif test not in defined[file]:
                missing.append(f"{doc.name}: {file}::{test}")
    assert not missing, "documents cite tests that do not exist:\n" + "\n".join(sorted(set(missing)))
