"""Adding a GPU metric: one entry in gpu_widgets.metrics.catalogue, and every view knows it.

A made-up metric is added to the catalogue (``catalogue.METRICS`` patched), then each place that
must know it is asked: the served ``/metrics`` and the OpenAPI document, the sidebar's metric list
(the sidebar's own TypeScript run on the served answer, and its settings schema), a real
TrainingMonitor's charts, a real GpuDashboard's charts, and the docs table. Each check fails with
a message naming the metric; the docs check is also shown failing for a metric the docs lack.
The checklist these tests enforce is in docs/architecture.md ("Adding a GPU metric").
"""
from __future__ import annotations

import json
import re
import subprocess
from collections.abc import Iterable
from pathlib import Path
from typing import Any

import pytest

from gpu_widgets import GpuDashboard, TrainingMonitor
from gpu_widgets.metrics import catalogue
from gpu_widgets.metrics.catalogue import SIDEBAR, VIEWS, Metric

from .api_schema import document, validate_response
from .widget_helpers import run_dir, simulated_sampler  # noqa: F401

ROOT = Path(__file__).resolve().parents[1]
DOCS_TABLE = ROOT / "docs" / "metrics.md"
# A real sample field that no catalogue entry reads yet, so the simulated GPUs give it values.
NEW = Metric("sm_clock", "sm_clock_mhz", "SM clock", "MHz", "Clock of the streaming multiprocessors now.",
             y_max=None, views=frozenset(VIEWS))


@pytest.fixture
def with_new_metric(monkeypatch: pytest.MonkeyPatch) -> Metric:
    assert all(m.id != NEW.id for m in catalogue.METRICS), "the made-up metric is a real one now: pick another"
    monkeypatch.setattr(catalogue, "METRICS", (*catalogue.METRICS, NEW))
    return NEW


# -- the docs table (docs/metrics.md) -------------------------------------------------------------
COLUMNS = ("id", "field", "title", "unit", "views", "help")


def doc_cells(m: Metric) -> tuple[str, ...]:
    """A metric's row of the docs table, cell by cell, as the catalogue says it."""
    return (f"`{m.id}`", f"`{m.field}`", m.title, m.unit, ", ".join(v for v in VIEWS if v in m.views),
            m.help.replace("|", "\\|"))


def doc_row(m: Metric) -> str:
    return "| " + " | ".join(doc_cells(m)) + " |"


def table_rows(text: str) -> dict[str, tuple[str, ...]]:
    """The docs table's rows by metric id (the first cell, without its backticks)."""
    rows = {}
    for line in text.splitlines():
        if line.startswith("| `"):
            cells = tuple(c.strip() for c in re.split(r"(?<!\\)\|", line.strip())[1:-1])
            rows[cells[0].strip("`")] = cells
    return rows


def docs_table_problems(text: str, metrics: Iterable[Metric]) -> list[str]:
    """What the docs table gets wrong about ``metrics``: each problem names the metric."""
    rows = table_rows(text)
    problems = []
    ids = set()
    for m in metrics:
        ids.add(m.id)
        got = rows.get(m.id)
        if got is None:
            problems.append(f"metric {m.id!r} is missing from docs/metrics.md; add the row: {doc_row(m)}")
            continue
        for column, want, have in zip(COLUMNS, doc_cells(m), got):
            if want != have:
                problems.append(f"metric {m.id!r} differs in docs/metrics.md: {column} is {have!r}, "
                                f"the catalogue says {want!r}")
    problems += [f"docs/metrics.md lists {extra!r}, which the catalogue does not have"
                 for extra in rows.keys() - ids]
    return problems


def test_the_docs_table_is_the_catalogue():
    assert docs_table_problems(DOCS_TABLE.read_text(), catalogue.METRICS) == []


def test_a_metric_the_docs_do_not_list_fails_the_docs_check_naming_it(with_new_metric):
    problems = docs_table_problems(DOCS_TABLE.read_text(), catalogue.METRICS)
    assert problems == [f"metric 'sm_clock' is missing from docs/metrics.md; add the row: {doc_row(NEW)}"]
    # once its row is added, the check passes
    assert docs_table_problems(DOCS_TABLE.read_text() + doc_row(NEW) + "\n", catalogue.METRICS) == []


def test_a_docs_row_that_differs_or_is_left_over_is_named():
    text = DOCS_TABLE.read_text().replace("GPU power (W)", "power (W)")
    assert docs_table_problems(text, catalogue.METRICS) == [
        "metric 'power' differs in docs/metrics.md: title is 'power (W)', the catalogue says 'GPU power (W)'"]
    without_power = "\n".join(line for line in text.splitlines() if not line.startswith("| `power`"))
    assert docs_table_problems(without_power, catalogue.METRICS) == [
        f"metric 'power' is missing from docs/metrics.md; add the row: {doc_row(catalogue.metric('power'))}"]
    assert docs_table_problems(DOCS_TABLE.read_text(), catalogue.METRICS[:-1]) == [
        "docs/metrics.md lists 'power', which the catalogue does not have"]


# -- the API: served, and described by openapi.json ------------------------------------------------
def schema_problems(body: dict[str, Any], m: Metric) -> list[str]:
    """What the API and its document do not know about ``m``."""
    served = {x["id"]: x for x in body["metrics"]}
    if m.id not in served:
        return [f"metric {m.id!r} is not served by /metrics"]
    problems = []
    try:
        validate_response("/metrics", body)
    except Exception as exc:  # the validator's own message says where
        problems.append(f"/metrics with metric {m.id!r} does not validate against openapi.json: {exc}")
    schemas = document()["components"]["schemas"]
    for schema in ("DeviceSample", "DeviceHistory"):
        for field in (m.field, m.y_max_field):
            if field is not None and field not in schemas[schema]["properties"]:
                problems.append(f"metric {m.id!r} reads {field!r}, which openapi.json's {schema} does not have")
    return problems


async def test_the_api_serves_the_new_metric_and_its_schema_knows_it(with_new_metric, jp_fetch):
    response = await jp_fetch("gpu-widgets", "api", "v1", "metrics")
    body = json.loads(response.body)
    assert [m["id"] for m in body["metrics"]][-1] == "sm_clock", "metric 'sm_clock' is not served by /metrics"
    assert body["metrics"][-1] == NEW.as_json()
    assert schema_problems(body, NEW) == []


def test_a_field_the_api_does_not_have_is_named():
    ghost = Metric("ghost", "ghost_watts", "Ghost", "W", "Not a field.", y_max_field="ghost_limit_w")
    body = {"metrics": [ghost.as_json()], "throttle_reasons": []}
    assert schema_problems(body, ghost) == [
        f"metric 'ghost' reads {f!r}, which openapi.json's {s} does not have"
        for s in ("DeviceSample", "DeviceHistory") for f in ("ghost_watts", "ghost_limit_w")]


# -- the sidebar: its own code on the served answer, and its settings schema ----------------------
SIDEBAR_LIST = r"""
const fs = require('fs');
const ts = require('typescript');
const src = fs.readFileSync('labextension/src/api/catalogue.ts', 'utf8');
const js = ts.transpileModule(src, { compilerOptions: { module: ts.ModuleKind.CommonJS, target: ts.ScriptTarget.ES2020 } });
const mod = { exports: {} };
new Function('module', 'exports', 'require', js.outputText)(mod, mod.exports, name => {
  throw new Error('catalogue.ts needs ' + name + ' at run time: keep it pure');
});
const body = JSON.parse(fs.readFileSync(0, 'utf8'));
process.stdout.write(JSON.stringify(mod.exports.parseCatalogue(body).sidebar.map(m => m.id)));
"""


def sidebar_metric_ids(body: dict[str, Any]) -> list[str]:
    """The metrics the sidebar's cards offer for this ``/metrics`` answer, worked out by the
    sidebar's own catalogue.ts (transpiled by the repository's TypeScript, run in node)."""
    done = subprocess.run(["node", "-e", SIDEBAR_LIST], input=json.dumps(body), capture_output=True, text=True,
                          cwd=ROOT, timeout=60)
    assert done.returncode == 0, f"the sidebar's catalogue.ts did not run (jlpm install first?): {done.stderr}"
    return json.loads(done.stdout)


async def test_the_sidebar_offers_exactly_the_served_sidebar_metrics(with_new_metric, jp_fetch):
    body = json.loads((await jp_fetch("gpu-widgets", "api", "v1", "metrics")).body)
    served = [m["id"] for m in body["metrics"] if SIDEBAR in m["views"]]
    shown = sidebar_metric_ids(body)
    assert NEW.id in shown, f"the sidebar does not offer metric {NEW.id!r}: it offers {shown}"
    assert shown == served
    # and one the catalogue keeps off the sidebar stays off
    body["metrics"][-1]["views"] = ["monitor"]
    assert NEW.id not in sidebar_metric_ids(body)


def test_the_sidebar_settings_accept_every_metric_id(with_new_metric):
    """plugin.json's ``metrics`` setting must not refuse a catalogue id (no hand-kept enum)."""
    setting = json.loads((ROOT / "labextension" / "schema" / "plugin.json").read_text())["properties"]["metrics"]
    items = setting["items"]
    sidebar_ids = [m.id for m in catalogue.shown_in(SIDEBAR)]
    if "enum" in items:  # a list kept there must be the catalogue's, generated
        missing = [i for i in sidebar_ids if i not in items["enum"]]
        assert not missing, f"labextension/schema/plugin.json's metrics enum refuses {missing}"
    pattern = items.get("pattern")
    refused = [i for i in sidebar_ids if pattern and not re.fullmatch(pattern, i)]
    assert not refused, f"labextension/schema/plugin.json's metrics pattern {pattern!r} refuses {refused}"
    assert all(i in sidebar_ids for i in setting.get("default", sidebar_ids)), setting.get("default")


# -- the notebook widgets --------------------------------------------------------------------------
def figure_titles(widget: Any) -> list[str]:
    """Titles of every bqplot Figure under ``widget`` (whatever holds them on the Python side)."""
    from bqplot import Figure

    if isinstance(widget, Figure):
        return [widget.title]
    return [t for child in getattr(widget, "children", ()) for t in figure_titles(child)]


def test_the_training_monitor_charts_the_new_metric(with_new_metric):
    sampler = simulated_sampler()
    mon = TrainingMonitor("t", display=False, run_log=False, sampler=sampler)
    try:
        for step in range(4):
            sampler.tick()
            mon.log(step=step, loss=1.0 / (step + 1))
        mon.refresh()
        titles = figure_titles(mon.widget)
        assert NEW.title in titles, f"the TrainingMonitor has no chart for metric {NEW.id!r}: {titles}"
        assert "GPU busy (%)" in titles  # the catalogue's titles, as everywhere
    finally:
        mon.finish()


def test_the_gpu_dashboard_charts_the_new_metric(with_new_metric):
    sampler = simulated_sampler()
    for _ in range(3):
        sampler.tick()
    dash = GpuDashboard(sampler=sampler, start=False, display=False)
    dash.refresh()
    titles = figure_titles(dash.widget)
    assert NEW.title in titles, f"the GpuDashboard has no chart for metric {NEW.id!r}: {titles}"
    clock = dash._view.charts[NEW.id].lines["GPU 0"].y
    assert clock[-1] == sampler.latest["devices"][0]["sm_clock_mhz"]
    words = re.sub(r"<[^>]+>", "", dash.widget.children[0].value)  # the header's text, label then value
    assert f"SM clock {NEW.text(sampler.latest['devices'][0]['sm_clock_mhz'])}" in words


def test_the_cell_summary_reports_the_new_metric(with_new_metric):
    from gpu_widgets.magic.summary import summarize
    from gpu_widgets.runs.gpu_trace import GpuTrace

    sampler = simulated_sampler()
    trace = GpuTrace(0.0)
    clocks = []
    for _ in range(3):
        sampler.tick()
        trace.add_snapshot(sampler.latest)
        clocks.append(sampler.latest["devices"][0]["sm_clock_mhz"])
    text, data = summarize(trace, 3.0, 1.0)
    assert f"SM clock peak {NEW.text(max(clocks))}" in text, f"the %%gpuwatch summary lacks metric {NEW.id!r}: {text}"
    assert data["gpus"][0]["peaks"][NEW.id] == max(clocks)
    assert "busy mean" in text and "memory peak" in text  # the wording kept for the others
