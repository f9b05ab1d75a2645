"""How to make a sidebar's first history answer small: gzip, a compact encoding, or both (issue 38).

In one process, no server: the simulated GPUs (8 by default) sampled at 1 Hz for an hour on a
fast-forwarded clock (the real sampler and history), then the ``samples`` answer of the
sidebar's default window (600 s) at 600 and 300 points per GPU, as the server makes it, and:
- gzip at levels 1 and 6 (the time is one compression, as the server makes it once per answer);
- a compact encoding of the same columns: whole numbers written without ``.0`` and a column
  that holds one value throughout written once (``{"all": v, "n": len}``);
- that compact encoding gzipped.

    python -m benchmarks.history_encoding [--gpus 8]
"""
from __future__ import annotations

import argparse
import json
import time
import zlib
from typing import Any

WINDOW_S = 600.0


class _Clock:
    t = 0.0

    def monotonic(self) -> float:
        return self.t

    def wall(self) -> float:
        return 1.7e9 + self.t

    def wait(self, event: Any, timeout: float) -> bool:
        return event.is_set()


def _whole(o: Any) -> Any:
    if isinstance(o, float) and o.is_integer() and abs(o) < 2 ** 53:
        return int(o)
    if isinstance(o, list):
        return [_whole(x) for x in o]
    if isinstance(o, dict):
        return {k: _whole(v) for k, v in o.items()}
    return o


def _runs(o: Any) -> Any:
    if isinstance(o, list) and len(o) > 2 and all(x == o[0] for x in o):
        return {"all": o[0], "n": len(o)}
    if isinstance(o, dict):
        return {k: _runs(v) for k, v in o.items()}
    return o


def _gz(raw: bytes, level: int) -> tuple[int, float]:
    t0 = time.perf_counter()
    out = zlib.compress(raw, level)
    return len(out), (time.perf_counter() - t0) * 1e3


def measure(gpus: int = 8) -> dict[str, Any]:
    from gpu_widgets.backends import SimulatedBackend
    from gpu_widgets.sampling.sampler import Sampler
    from gpu_widgets.service.samples import SamplesAnswers

    clock = _Clock()
    backend = SimulatedBackend(n_gpus=gpus, seed=1, t0=clock.wall(), clock=clock.wall)
    sampler = Sampler(backend, interval_s=1.0, window_s=3600.0, clock=clock)
    backend.open()
    for k in range(3600):
        clock.t += 1.0
        if k % 5 == 0:
            sampler._read_slow()
        sampler.tick()
    status = {"backend": "simulated", "status": "ok", "interval_s": 1.0, "window_s": 3600.0}
    answers = SamplesAnswers(lambda: sampler.history, lambda: sampler.latest, lambda: status)
    rows = []
    for points in (600, 300):
        text = answers.json(clock.wall() - WINDOW_S, points)
        doc = json.loads(text)
        compact = json.dumps(_runs(_whole(doc)), separators=(",", ":")).encode()
        raw = text.encode()
        for name, data in (("JSON as sent", raw), ("compact", compact)):
            g1, t1 = _gz(data, 1)
            g6, t6 = _gz(data, 6)
            rows.append({"points": points, "encoding": name, "bytes": len(data), "gzip1_bytes": g1, "gzip1_ms": t1,
                         "gzip6_bytes": g6, "gzip6_ms": t6})
    answers.stop()
    return {"gpus": gpus, "window_s": WINDOW_S, "rows": rows}


def table(result: dict[str, Any]) -> list[str]:
    lines = [f"{result['gpus']} simulated GPUs at 1 Hz, an hour held, the last {result['window_s']:g} s asked", "",
             "| points per GPU | encoding | KB | gzip -1 KB (ms) | gzip -6 KB (ms) |", "| ---: | --- | ---: | ---: | ---: |"]
    for r in result["rows"]:
        lines.append(f"| {r['points']} | {r['encoding']} | {r['bytes'] / 1e3:.1f} | {r['gzip1_bytes'] / 1e3:.1f} "
                     f"({r['gzip1_ms']:.1f}) | {r['gzip6_bytes'] / 1e3:.1f} ({r['gzip6_ms']:.1f}) |")
    return lines


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--gpus", type=int, default=8)
    args = parser.parse_args()
    if args.gpus < 1:
        parser.error("--gpus must be at least 1")
    print("\n".join(table(measure(args.gpus))))


if __name__ == "__main__":
    main()
