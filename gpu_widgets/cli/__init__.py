"""`gpu-widgets`: look at the GPUs from a terminal. Starts fast: no widget or plotting imports."""
from __future__ import annotations

import argparse
import json
import os
import sys
import time
from typing import Any, Sequence

from .._version import __version__
from ..backends import CHOICES, ConfigError, open_backend, resolve_choice
from ..sampling.guarded import GuardedReader
from . import exporter as exporter_cli
from . import runs as runs_cli

MIN_WATCH_S = 0.1


def _seconds(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a number of seconds, got {text!r}") from None
    if not value >= MIN_WATCH_S or value == float("inf"):
        raise argparse.ArgumentTypeError(f"must be at least {MIN_WATCH_S} seconds, got {text!r}")
    return value


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="gpu-widgets",
        description="Watch NVIDIA GPUs: utilization, memory, temperature, power, clocks, throttling, processes.",
    )
    parser.add_argument("--version", action="version", version=f"gpu-widgets {__version__}")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    backend_help = f"where readings come from: {', '.join(CHOICES)} (default: $GPU_WIDGETS_BACKEND or auto)"

    snap = sub.add_parser("snapshot", help="print the state of every GPU")
    snap.add_argument("--json", action="store_true", help="print the sample as JSON (one object per line with --watch)")
    snap.add_argument("--backend", choices=CHOICES, help=backend_help)
    snap.add_argument("--watch", type=_seconds, metavar="SECONDS", help="refresh every SECONDS until Ctrl-C")

    info = sub.add_parser("info", help="print each GPU's static facts (the spec card)")
    info.add_argument("--json", action="store_true", help="print JSON")
    info.add_argument("--backend", choices=CHOICES, help=backend_help)

    sub.add_parser("probe", help="exit 0 when NVML can read a real GPU here, else print why and exit 1")
    runs_cli.add_parser(sub)
    exporter_cli.add_parser(sub)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    args = _parse(parser, argv)
    if args.command is None:
        parser.print_help()
        return 0
    if args.command == "exporter":
        return exporter_cli.run(args)
    if args.command == "runs":
        try:
            return runs_cli.main(args)
        except runs_cli.UsageError as exc:
            print(f"gpu-widgets runs: error: {exc}", file=sys.stderr)
            return 2
        except BrokenPipeError:
            return 0
    try:
        if args.command == "probe":
            return _probe()
        if args.command == "snapshot":
            resolve_choice(args.backend)  # a bad setting exits 2 before any thread starts
            return _snapshot(GuardedReader(args.backend, args.watch or 1.0), args.json, args.watch)
        backend = open_backend(args.backend)
    except ConfigError as exc:
        print(f"gpu-widgets: error: {exc}", file=sys.stderr)
        return 2
    try:
        return _info(backend, args.json)
    except BrokenPipeError:
        return 0
    finally:
        backend.close()


def _parse(parser: argparse.ArgumentParser, argv: Sequence[str] | None) -> argparse.Namespace:
    # argparse reports a subcommand's unknown flags through the top-level parser, whose usage does
    # not mention the subcommand's flags: report them through the subcommand's own parser instead.
    args, extra = parser.parse_known_args(argv)
    if extra:
        owner = _subparsers(parser).get(args.command, parser) if args.command else parser
        owner.error(f"unrecognized arguments: {' '.join(extra)}")
    return args


def _subparsers(parser: argparse.ArgumentParser) -> dict[str, argparse.ArgumentParser]:
    for action in parser._actions:  # argparse keeps the subcommand table only there
        if isinstance(action, argparse._SubParsersAction):
            return dict(action.choices)
    return {}


def _probe() -> int:
    backend = open_backend("nvml")
    if backend.status == "ok":
        n = len(backend.device_info())
        print(f"NVML ok: driver {backend.system.get('driver_version')}, {n} GPU{'s' if n != 1 else ''}")
        return 0
    print(f"no usable NVIDIA GPU: {backend.reason}")
    return 1


def _info(backend: Any, as_json: bool) -> int:
    from .render import render_info

    devices = backend.device_info()
    if as_json:
        print(json.dumps({"backend": backend.name, "status": backend.status, "reason": backend.reason,
                          **backend.system, "devices": devices}, indent=2))
    elif backend.status != "ok":
        print(f"No NVIDIA GPU available: {backend.reason}")
    else:
        print(render_info(backend.system, devices, backend.name))
    return 0


def _snapshot(reader: GuardedReader, as_json: bool, watch: float | None) -> int:
    try:
        return _print_snapshots(reader, as_json, watch)
    except KeyboardInterrupt:
        return 0  # Ctrl-C is how --watch ends
    except BrokenPipeError:
        return 0  # `gpu-widgets snapshot --watch 1 | head` closed the pipe
    finally:
        if reader.stuck:
            # A driver call that never returns: exit without waiting on it (NVML's shutdown
            # at exit would wait behind it).
            sys.stdout.flush()
            os._exit(0)
        if reader.backend is not None:
            reader.backend.close()


def _print_snapshots(reader: GuardedReader, as_json: bool, watch: float | None) -> int:
    from ..sampling.snapshot import public
    from .render import render_snapshot

    clear = watch is not None and not as_json and sys.stdout.isatty()
    while True:
        snap = reader.snapshot()
        if as_json:
            print(json.dumps(public(snap), indent=None if watch else 2), flush=True)  # reasons named here
        else:
            if clear:
                sys.stdout.write("\033[H\033[J")
            print(render_snapshot(snap, __version__), flush=True)
        if watch is None:
            return 0
        if not clear and not as_json:
            print()
        time.sleep(watch)

