"""Run the benchmark suite: print the tables and write them as JSON.

    python -m benchmarks.run                  # everything (about 15 minutes on 2 cores)
    python -m benchmarks.run --smoke          # seconds, tiny counts: checks that nothing rotted
    python -m benchmarks.run --only sampler,server
    python -m benchmarks.run --install-peers  # first create/refresh the contenders' own venv
    make bench                                # = --install-peers, then everything

Sections: sampler (CPU per sample), server (latency, loop lag, NVML calls under 1/10/100 pollers),
training (slowdown of a real PyTorch loop, log() cost), payload (bytes per redraw), memory (after
24 h), history (heavy history requests on 64 GPUs), parallel (per-rank cost on a 2-rank gloo launch,
torch.distributed calls per step, follow() of 8 ranks x 10^5 steps), profile (what mon.profile() costs the
profiled steps and those after). The contenders (nvitop, gpustat, jupyterlab-nvdashboard, livelossplot, tqdm) live in
benchmarks/.cache/venv-peers; without it their rows are skipped and the reason is printed.
See docs/benchmarks.md.
"""
from __future__ import annotations

import argparse
import json
import sys
import time
import traceback
from pathlib import Path
from typing import Any, Callable

from . import common

SECTIONS = ("sampler", "server", "training", "payload", "memory", "history", "parallel", "profile")
TITLES = {
    "sampler": "1. Sampler cost: CPU per full sample of 8 GPUs x 8 processes (same fake NVML for all)",
    "server": "2. Server: latency, event-loop lag and NVML calls under pollers (PCIe call blocks 20 ms)",
    "training": "3. Training overhead: real PyTorch CPU loop, interleaved runs",
    "payload": "4. Payload: bytes sent to the browser per redraw vs steps logged",
    "memory": "5. Memory after a long run (fast-forwarded)",
    "history": "6. Heavy history requests: 64 GPUs at 10 Hz, clients asking for 30 s and for the whole hour",
    "parallel": "8. Parallel training: per-rank overhead (2 gloo ranks), torch.distributed calls, following 8 ranks",
    "profile": "9. Profile: the profiled steps' slowdown, the steps after it, the time to the verdict",
}


def _section(name: str) -> tuple[Callable[..., dict[str, Any]], Callable[[dict[str, Any]], list[str]]]:
    if name == "sampler":
        from . import sampler_cost as m
    elif name == "server":
        from . import server_load as m  # type: ignore[no-redef]
    elif name == "training":
        from . import training as m  # type: ignore[no-redef]
    elif name == "payload":
        from . import payload as m  # type: ignore[no-redef]
    elif name == "history":
        from . import history_load as m  # type: ignore[no-redef]
    elif name == "parallel":
        from . import parallel as m  # type: ignore[no-redef]
    elif name == "profile":
        from . import profile_cost as m  # type: ignore[no-redef]
    else:
        from . import memory as m  # type: ignore[no-redef]
    return m.measure, m.table


def _peers_stamp() -> str:
    import hashlib

    text = json.dumps([common.project_dependencies(), common.bench_extra()])
    return hashlib.sha1(text.encode()).hexdigest()


def ensure_peers(log: Callable[[str], None]) -> None:
    stamp = common.PEERS_VENV / ".gw-bench-stamp"
    want = _peers_stamp()
    if stamp.exists() and stamp.read_text() == want:
        log(f"peers environment up to date: {common.PEERS_VENV}")
        return
    log(f"installing the contenders into {common.PEERS_VENV} (the `bench` extra of pyproject.toml) ...")
    common.install_peers()
    stamp.write_text(want)


def targets_table(results: dict[str, Any]) -> list[str]:
    lines = ["| section | target | status | measured | limit |", "| --- | --- | --- | --- | --- |"]
    for name in SECTIONS:
        sec = results["sections"].get(name) or {}
        for t in sec.get("targets", []) or []:
            value = t.get("value")
            if isinstance(value, float):
                value = f"{value:.3g}"
            lines.append(f"| {name} | {t['target']} | {t['status']} | {value} | {t.get('limit', '')} |")
    return lines


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.run", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--smoke", action="store_true", help="tiny counts, seconds (the test suite runs this)")
    parser.add_argument("--only", default=",".join(SECTIONS), help=f"comma-separated sections of {', '.join(SECTIONS)}")
    parser.add_argument("--no-peers", action="store_true", help="skip the contenders even if their venv exists")
    parser.add_argument("--install-peers", action="store_true",
                        help=f"create or refresh the contenders' venv ({common.PEERS_VENV}) first")
    parser.add_argument("--json", type=Path, default=None,
                        help="where to write the results (default: benchmarks/.cache/results/<time>.json)")
    args = parser.parse_args(argv)
    only = [s.strip() for s in args.only.split(",") if s.strip()]
    unknown = set(only) - set(SECTIONS)
    if unknown:
        parser.error(f"unknown section(s) {sorted(unknown)}; valid: {', '.join(SECTIONS)}")

    def log(msg: str) -> None:
        print(msg, file=sys.stderr, flush=True)

    if args.install_peers:
        ensure_peers(log)
    peers_py, why = common.peers_python()
    with_peers = not args.no_peers and peers_py is not None
    results: dict[str, Any] = {
        "command": "python -m benchmarks.run " + " ".join(argv if argv is not None else sys.argv[1:]),
        "smoke": args.smoke,
        "machine": common.machine_info(),
        "versions": {"project venv": common.package_versions(sys.executable)},
        "peers": {"venv": str(common.PEERS_VENV), "used": with_peers,
                  "reason": "--no-peers" if args.no_peers else why},
        "sections": {},
    }
    if peers_py is not None:
        results["versions"]["peers venv"] = common.package_versions(peers_py)
    out: list[str] = []

    def emit(lines: list[str]) -> None:
        out.extend(lines)
        print("\n".join(lines), flush=True)

    m = results["machine"]
    emit([f"gpu-widgets benchmarks{' (SMOKE: tiny counts, numbers are not meaningful)' if args.smoke else ''}",
          f"{m['date_utc']} | {m['cpu']} | {m['cores']} cores ({m['usable_cores']} usable) | {m['memory_gib']} GiB | "
          f"Python {m['python']} | {m['os']} | commit {m['git_commit']} | "
          f"load average {', '.join(f'{x:.2f}' for x in m['load_average_at_start'])}"])
    if not with_peers:
        emit([f"contenders skipped: {results['peers']['reason']}"])
    failed = False
    for name in only:
        emit(["", f"## {TITLES[name]}", ""])
        t0 = time.monotonic()
        measure, table = _section(name)
        kwargs: dict[str, Any] = {"smoke": args.smoke, "log": log}
        if name in ("sampler", "server", "training"):
            kwargs["with_peers"] = with_peers
        try:
            sec = measure(**kwargs)
        except Exception as exc:
            failed = True
            sec = {"error": f"{type(exc).__name__}: {exc}", "traceback": traceback.format_exc()}
            emit([f"FAILED: {sec['error']}"])
        else:
            emit(table(sec))
        sec["elapsed_s"] = round(time.monotonic() - t0, 1)
        results["sections"][name] = sec
    results["machine"]["load_average_at_end"] = __import__("os").getloadavg()
    emit(["", "## Targets", "", *targets_table(results)])
    path = args.json
    if path is None:
        stamp = time.strftime("%Y%m%d-%H%M%S")
        path = common.RESULTS_DIR / f"{stamp}{'-smoke' if args.smoke else ''}.json"
    path.parent.mkdir(parents=True, exist_ok=True)
    results["tables"] = out
    path.write_text(json.dumps(results, indent=1, default=str))
    print(f"\nresults written to {path}", flush=True)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
