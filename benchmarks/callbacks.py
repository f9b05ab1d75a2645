"""The framework callbacks' overhead: each framework's own training loop with GpuWidgetsCallback
against the same loop without it (and, for Lightning, with its own DeviceStatsMonitor instead).

Every framework trains the same model (MLP 64-512-512-10, batch 128, one torch thread, as in
section 3 of benchmarks/run.py) in its own worker process, on the fake driver with 8 GPUs. Each
run is one whole ``fit``/``train`` of a fresh trainer; the variants of a framework run
interleaved, in a fresh random order each round, and each run is compared with the run
without a callback of the same round. Two clocks, both read by marker callbacks that every
variant carries (one first in the list, one last, so the window holds every other callback's
hooks), from the start of step 6 to the end of the last step (the steady state):

* wall time per step, and its A/A noise floor (a second run without the callback);
* the CPU time of the loop's own thread per step (leaves out waiting for the core or the GIL);
* the overhead itself, measured rather than taken as a small difference of two noisy runs: the
  time spent inside the callback's hooks (each wrapped in a timer, whose own ~0.1 µs per call is
  counted too) plus the CPU the monitor's threads used, as a share of the window's wall time.
  Not in it: the Keras callback's wrapper of ``train_function`` (a few attribute reads per step),
  which only the A/B figures see.

The whole ``fit`` (trainer set-up and the monitor's start-up included) is reported too.

    .venv/bin/python -m benchmarks.callbacks [--smoke] [--only lightning,transformers,keras] [--json PATH]
                                             [--rounds 12] [--steps 256]
"""
from __future__ import annotations

import argparse
import gc
import importlib.util
import json
import os
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from .common import FakeDriver, Worker, WorkerError, interleaved, summary
from .training import _threads_cpu

FRAMEWORKS = ("lightning", "transformers", "keras")
MODULES = {"lightning": ("lightning",), "transformers": ("transformers", "accelerate"), "keras": ("keras",)}
VARIANTS = {fw: ("without", "without A/A", "gpu-widgets") for fw in FRAMEWORKS}
VARIANTS["lightning"] += ("DeviceStatsMonitor",)
LOG_EVERY = 10  # Lightning's log_every_n_steps, the Trainer's logging_steps (Keras logs every batch)
WARM_STEPS = 5  # the window starts after these: first-step costs are not the loop's steady state
ROUNDS, STEPS = 12, 256
BATCH, ROWS = 128, 4096


# -- the worker: one framework, its loop with each variant -------------------------------------------
class Marks:
    """Clock readings at step boundaries, from the marker callbacks."""

    def __init__(self, last: int) -> None:
        self.last = last
        self.begin: tuple[float, float] | None = None
        self.end: tuple[float, float] | None = None
        self.threads = [0.0, 0.0]  # the monitor's threads' CPU seconds at the window's two ends
        self.steps = 0
        self.hooks_s = 0.0  # seconds spent inside the measured callback's hooks in the window
        self.closed = False

    def step_begins(self) -> None:
        self.steps += 1
        if self.steps == WARM_STEPS + 1:
            self.threads[0] = sum(_threads_cpu("gpu-widgets").values())
            self.begin = (time.perf_counter(), time.thread_time())

    def step_ends(self) -> None:
        self.end = (time.perf_counter(), time.thread_time())
        if self.steps == self.last:  # read before the run ends: its threads stop then
            self.threads[1] = sum(_threads_cpu("gpu-widgets").values())
            self.closed = True


def timed(callback: Any, marks: Marks) -> Any:
    """``callback`` with each of its hooks (and the Trainer callback's forward pre-hook) timed
    into ``marks.hooks_s`` while the window is open: the time it takes from the loop's thread,
    measured directly rather than as a small difference of two noisy runs."""
    clock = time.perf_counter

    def wrap(method: Any) -> Any:
        def hook(*args: Any, **kwargs: Any) -> Any:
            t = clock()
            try:
                return method(*args, **kwargs)
            finally:
                if marks.begin is not None and not marks.closed:
                    marks.hooks_s += clock() - t
        return hook

    for name in dir(type(callback)):
        if name.startswith("on_") or name == "_count":
            method = getattr(callback, name)
            if callable(method):
                setattr(callback, name, wrap(method))
    return callback


def _data() -> tuple[Any, Any]:
    import torch

    g = torch.Generator().manual_seed(0)
    xs = torch.randn(ROWS, 64, generator=g)
    return xs, xs[:, :10].argmax(dim=1)


def _mlp() -> Any:
    from torch import nn

    return nn.Sequential(nn.Linear(64, 512), nn.ReLU(), nn.Linear(512, 512), nn.ReLU(), nn.Linear(512, 10))


def lightning_fit(variant: str, steps: int, run_dir: str) -> Marks:
    import lightning.pytorch as pl
    import torch
    from lightning.pytorch.loggers import Logger

    from gpu_widgets.integrations.lightning import GpuWidgetsCallback

    class Quiet(Logger):  # DeviceStatsMonitor needs a logger: every variant gets this one, which keeps nothing
        name, version = "quiet", 0

        def log_metrics(self, metrics, step=None) -> None:
            pass

        def log_hyperparams(self, params, *args, **kwargs) -> None:
            pass

    class Net(pl.LightningModule):
        def __init__(self) -> None:
            super().__init__()
            self.net = _mlp()

        def training_step(self, batch, batch_idx):
            loss = torch.nn.functional.cross_entropy(self.net(batch[0]), batch[1])
            self.log("train_loss", loss)
            return loss

        def configure_optimizers(self):
            return torch.optim.SGD(self.parameters(), lr=0.01, momentum=0.9)

    marks = Marks(steps)

    class First(pl.Callback):
        def on_train_batch_start(self, *args: Any) -> None:
            marks.step_begins()

    class Last(pl.Callback):
        def on_train_batch_end(self, *args: Any) -> None:
            marks.step_ends()

    extra = {"gpu-widgets": [timed(GpuWidgetsCallback(display=False, run_log=run_dir), marks)],
             "DeviceStatsMonitor": [timed(pl.callbacks.DeviceStatsMonitor(), marks)]}.get(variant, [])
    loader = torch.utils.data.DataLoader(torch.utils.data.TensorDataset(*_data()), batch_size=BATCH)
    trainer = pl.Trainer(accelerator="cpu", devices=1, max_steps=steps, max_epochs=-1, logger=Quiet(),
                         log_every_n_steps=LOG_EVERY, callbacks=[First(), *extra, Last()], enable_checkpointing=False,
                         enable_progress_bar=False, enable_model_summary=False, num_sanity_val_steps=0)
    trainer.fit(Net(), loader)
    return marks


def transformers_fit(variant: str, steps: int, run_dir: str) -> Marks:
    import torch
    import transformers

    from gpu_widgets.integrations.transformers import GpuWidgetsCallback

    class Net(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.net = _mlp()

        def forward(self, x, labels):
            return {"loss": torch.nn.functional.cross_entropy(self.net(x), labels)}

    xs, ys = _data()

    class Data(torch.utils.data.Dataset):
        def __len__(self) -> int:
            return ROWS

        def __getitem__(self, i: int) -> dict:
            return {"x": xs[i], "labels": ys[i]}

    marks = Marks(steps)

    class First(transformers.TrainerCallback):
        def on_step_begin(self, *args: Any, **kwargs: Any) -> None:
            marks.step_begins()

    class Last(transformers.TrainerCallback):
        def on_step_end(self, *args: Any, **kwargs: Any) -> None:
            marks.step_ends()

    extra = [timed(GpuWidgetsCallback(display=False, run_log=run_dir), marks)] if variant == "gpu-widgets" else []
    args = transformers.TrainingArguments(
        output_dir=tempfile.mkdtemp(prefix="gw-bench-hf-"), use_cpu=True, report_to=[], save_strategy="no",
        max_steps=steps, per_device_train_batch_size=BATCH, logging_steps=LOG_EVERY, disable_tqdm=True,
        learning_rate=0.01, dataloader_num_workers=0)
    trainer = transformers.Trainer(model=Net(), args=args, train_dataset=Data(), callbacks=[First(), *extra, Last()])
    trainer.remove_callback(transformers.PrinterCallback)  # printing every log row is not the loop's work
    trainer.train()
    return marks


def keras_fit(variant: str, steps: int, run_dir: str) -> Marks:
    import keras

    from gpu_widgets.integrations.keras import GpuWidgetsCallback

    marks = Marks(steps)

    class First(keras.callbacks.Callback):
        def on_train_batch_begin(self, batch, logs=None) -> None:
            marks.step_begins()

    class Last(keras.callbacks.Callback):
        def on_train_batch_end(self, batch, logs=None) -> None:
            marks.step_ends()

    model = keras.Sequential([keras.Input(shape=(64,)), keras.layers.Dense(512, activation="relu"),
                              keras.layers.Dense(512, activation="relu"), keras.layers.Dense(10)])
    model.compile(optimizer=keras.optimizers.SGD(0.01, momentum=0.9),
                  loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True))
    xs, ys = (t.numpy() for t in _data())
    per_epoch = ROWS // BATCH
    marks.last = max(1, steps // per_epoch) * per_epoch
    extra = [timed(GpuWidgetsCallback(display=False, run_log=run_dir), marks)] if variant == "gpu-widgets" else []
    model.fit(xs, ys, batch_size=BATCH, epochs=max(1, steps // per_epoch), verbose=0,
              callbacks=[First(), *extra, Last()])
    return marks


def worker(framework: str) -> None:
    import torch

    from .common import serve

    torch.set_num_threads(1)  # the second core is left to the monitor's threads (see benchmarks/training.py)
    fit = {"lightning": lightning_fit, "transformers": transformers_fit, "keras": keras_fit}[framework]
    run_dir = tempfile.mkdtemp(prefix="gw-bench-runs-")

    def run(variant: str, steps: int) -> dict[str, Any]:
        gc.collect()
        began = time.perf_counter()
        marks = fit(variant, steps, run_dir)
        whole = time.perf_counter() - began
        if marks.begin is None or marks.end is None:
            raise RuntimeError(f"{framework}: fewer than {WARM_STEPS + 1} steps ran")
        wall, cpu = marks.end[0] - marks.begin[0], marks.end[1] - marks.begin[1]
        threads = marks.threads[1] - marks.threads[0]
        n = marks.steps - WARM_STEPS
        return {"steps": marks.steps, "wall_ms": 1e3 * wall / n, "cpu_ms": 1e3 * cpu / n, "fit_s": whole,
                "threads_share": threads / wall, "hooks_share": marks.hooks_s / wall}

    def info() -> dict[str, Any]:
        import importlib.metadata as md

        dist = {"lightning": "lightning", "transformers": "transformers", "keras": "keras"}[framework]
        return {"torch": torch.__version__, framework: md.version(dist)}

    serve({"run": run, "info": info})


# -- the orchestrator ---------------------------------------------------------------------------------
def _ratios(a: list[float], b: list[float]) -> dict[str, Any]:
    return summary([x / y - 1.0 for x, y in zip(a, b)])


def measure_one(framework: str, rounds: int, steps: int, log: Any = print) -> dict[str, Any]:
    missing = [m for m in ("torch", *MODULES[framework]) if importlib.util.find_spec(m) is None]
    if missing:
        return {"skipped": f"not installed: {', '.join(missing)} (pip install 'gpu-widgets[{framework}]')"}
    variants = VARIANTS[framework]
    with FakeDriver() as driver:
        env = driver.env(GPU_WIDGETS_BACKEND="nvml", KERAS_BACKEND="torch", HF_HUB_OFFLINE="1",
                         TOKENIZERS_PARALLELISM="false")
        w = Worker(sys.executable, "benchmarks.callbacks", ["--worker", framework], env, timeout=1200)
        try:
            result: dict[str, Any] = {"versions": w.call(op="info"), "rounds": rounds, "steps_per_run": steps}
            for v in variants:  # warm-up: imports, the first sampler start
                w.call(op="run", variant=v, steps=WARM_STEPS + 5)
            runs: dict[str, list[dict[str, Any]]] = {v: [] for v in variants}
            for _, v in interleaved(variants, rounds, seed=2):
                runs[v].append(w.call(op="run", variant=v, steps=steps))
        except WorkerError as exc:
            return {"skipped": f"the {framework} worker failed: {exc}"}
        finally:
            w.close()
    base = runs["without"]
    keys = ("wall_ms", "cpu_ms", "fit_s", "threads_share", "hooks_share")
    col = {key: {v: [r[key] for r in rs] for v, rs in runs.items()} for key in keys}
    result["ms_per_step"] = {v: summary(t) for v, t in col["wall_ms"].items()}
    result["steps_run"] = base[0]["steps"]
    result["variants"] = {}
    for v in variants[1:]:
        cpu_added = _ratios(col["cpu_ms"][v], col["cpu_ms"]["without"])
        threads, hooks = summary(col["threads_share"][v]), summary(col["hooks_share"][v])
        result["variants"][v] = {
            "hooks_share": hooks, "overhead": hooks["median"] + threads["median"],
            "wall_slowdown": _ratios(col["wall_ms"][v], col["wall_ms"]["without"]),
            "loop_cpu_added": cpu_added, "monitor_threads_share": threads,
            "cpu_overhead": cpu_added["median"] + threads["median"],
            "fit_slowdown": _ratios(col["fit_s"][v], col["fit_s"]["without"]),
        }
    log(f"  {framework}: done")
    return result


def measure(frameworks: tuple[str, ...] = FRAMEWORKS, smoke: bool = False, log: Any = print,
            rounds: int = ROUNDS, steps: int = STEPS) -> dict[str, Any]:
    rounds, steps = (2, 20) if smoke else (rounds, steps)
    out = {}
    for fw in frameworks:
        log(f"  {fw}: {', '.join(VARIANTS[fw])}; {rounds} interleaved rounds of {steps} steps")
        out[fw] = measure_one(fw, rounds, steps, log)
    return out


def _pct(s: dict[str, Any]) -> str:
    return f"{100 * s['median']:+.2f} % ({100 * s['p25']:+.2f} to {100 * s['p75']:+.2f})"


def table(results: dict[str, Any]) -> list[str]:
    lines = ["| framework | variant | wall ms / step | wall slowdown, median (p25 to p75) | loop-thread CPU added | "
             "time in its hooks | its threads' CPU | **overhead** (hooks + threads) | whole fit |",
             "| --- | --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: |"]
    skipped = []
    for fw, r in results.items():
        if "skipped" in r:
            skipped.append(f"skipped {fw}: {r['skipped']}")
            continue
        lines.append(f"| {fw} | without | {r['ms_per_step']['without']['median']:.3f} | | | | | | |")
        for v, s in r["variants"].items():
            share = s["monitor_threads_share"]["median"]
            label = v + (" (noise floor)" if v.endswith("A/A") else "")
            measured = "A/A" not in v
            hooks = f"{100 * s['hooks_share']['median']:.2f} %" if measured else ""
            total = f"**{100 * s['overhead']:.2f} %**" if measured else ""
            lines.append(f"| {fw} | {label} | {r['ms_per_step'][v]['median']:.3f} | {_pct(s['wall_slowdown'])} | "
                         f"{100 * s['loop_cpu_added']['median']:+.2f} % | {hooks} | {100 * share:.2f} % | "
                         f"{total} | {100 * s['fit_slowdown']['median']:+.1f} % |")
    return lines + [""] + skipped


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--worker", choices=FRAMEWORKS, help=argparse.SUPPRESS)
    parser.add_argument("--smoke", action="store_true", help="tiny counts: checks that it runs, measures nothing")
    parser.add_argument("--only", default=",".join(FRAMEWORKS), help="comma-separated: lightning,transformers,keras")
    parser.add_argument("--json", type=Path, help="also write the results here")
    parser.add_argument("--rounds", type=int, default=ROUNDS, help=f"interleaved rounds (default {ROUNDS})")
    parser.add_argument("--steps", type=int, default=STEPS, help=f"steps per run (default {STEPS}; at least 32)")
    args = parser.parse_args()
    if args.worker:
        worker(args.worker)
        return 0
    chosen = tuple(x.strip() for x in args.only.split(",") if x.strip())
    if unknown := [x for x in chosen if x not in FRAMEWORKS]:
        parser.error(f"unknown framework {', '.join(unknown)}; choose from {', '.join(FRAMEWORKS)}")
    if args.rounds < 1 or args.steps < 32:
        parser.error("--rounds must be at least 1 and --steps at least 32 (one Keras epoch)")
    results = measure(chosen, smoke=args.smoke, rounds=args.rounds, steps=args.steps)
    print("\n".join(table(results)))
    if args.json:
        args.json.write_text(json.dumps(results, indent=1))
    return 0


if __name__ == "__main__":
    os.environ.setdefault("KERAS_BACKEND", "torch")
    sys.exit(main())
