"""The documents that describe the contract stay in step with the code."""
from __future__ import annotations

import json
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
