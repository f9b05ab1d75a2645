"""`gpu-widgets exporter`: the server's Prometheus exposition from a process of its own, for nodes
without Jupyter. One sampler; ``/metrics`` renders what it holds, like the server's endpoint, and
never calls the driver. SIGTERM and Ctrl-C stop it cleanly (exit 0, sampler stopped, NVML closed).
"""
from __future__ import annotations

import argparse
import signal
import socket
import sys
import threading
from socketserver import ThreadingMixIn
from typing import Any, Callable, Iterable
from wsgiref.simple_server import WSGIRequestHandler, WSGIServer, make_server

from ..backends import CHOICES, ConfigError, resolve_choice, simulated_from_env

DEFAULT_PORT = 9400  # dcgm-exporter's port: a node runs one or the other
DEFAULT_HOST = "0.0.0.0"  # scraped from the Prometheus server's machine, as node exporters are
READY_WAIT_S = 10.0  # how long to wait for the backend before saying what it serves


def _port(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a port number (0-65535), got {text!r}") from None
    if not 0 <= value <= 65535:
        raise argparse.ArgumentTypeError(f"expected a port number (0-65535; 0 picks a free one), got {value}")
    return value


def _interval(text: str) -> float:
    from ..sampling.sampler import MIN_INTERVAL_S

    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a number of seconds, got {text!r}") from None
    if not MIN_INTERVAL_S <= value < float("inf"):
        raise argparse.ArgumentTypeError(f"must be at least {MIN_INTERVAL_S} seconds, got {text!r}")
    return value


def add_parser(sub: Any) -> None:
    p = sub.add_parser("exporter", help="serve the GPUs' Prometheus metrics (DCGM names) over HTTP",
                       description="Serve /metrics in dcgm-exporter's names from one sampler, until SIGTERM or Ctrl-C.")
    p.add_argument("--port", type=_port, default=DEFAULT_PORT, help=f"port to listen on (default {DEFAULT_PORT}; 0: any free port)")
    p.add_argument("--host", default=DEFAULT_HOST, help=f"address to listen on (default {DEFAULT_HOST}: every interface)")
    p.add_argument("--backend", choices=CHOICES, help="where readings come from (default: $GPU_WIDGETS_BACKEND or auto)")
    p.add_argument("--interval-s", type=_interval, default=1.0, metavar="SECONDS", help="seconds between samples (default 1)")
    p.add_argument("--hostname", default="", help="the Hostname label of every GPU (default: this machine's host name)")
    p.add_argument("--show-other-users-processes", action="store_true",
                   help="label other users' GPU processes with their user (hidden by default)")


class UsageError(Exception):
    """A bad argument found after parsing: the message says which and why."""


class _Server(ThreadingMixIn, WSGIServer):
    daemon_threads = True  # a slow scraper must not hold the exit up


class _QuietHandler(WSGIRequestHandler):
    def log_message(self, format: str, *args: Any) -> None:
        pass  # one line per scrape would drown the journal


def _app(scrape: Callable[[], bytes], content_type: str) -> Callable[..., Iterable[bytes]]:
    page = (b"<!doctype html><title>gpu-widgets exporter</title><h1>gpu-widgets exporter</h1>"
            b'<p><a href="metrics">/metrics</a>: the GPUs in dcgm-exporter\'s names.</p>')

    def app(environ: dict[str, Any], start_response: Callable[..., Any]) -> Iterable[bytes]:
        path, method = environ.get("PATH_INFO", "/"), environ.get("REQUEST_METHOD", "GET")
        if method not in ("GET", "HEAD"):
            start_response("405 Method Not Allowed", [("Content-Type", "text/plain"), ("Allow", "GET, HEAD")])
            return [b"only GET\n"]
        if path == "/metrics":
            body, kind = scrape(), content_type
        elif path == "/":
            body, kind = page, "text/html; charset=utf-8"
        else:
            start_response("404 Not Found", [("Content-Type", "text/plain")])
            return [b"not found: the metrics are at /metrics\n"]
        start_response("200 OK", [("Content-Type", kind), ("Content-Length", str(len(body)))])
        return [b"" if method == "HEAD" else body]

    return app


def main(args: argparse.Namespace) -> int:
    """Run until SIGTERM / Ctrl-C. Raises UsageError for bad arguments (the caller exits 2)."""
    choice = _checked_backend(args.backend)
    from ..export.exposition import CONTENT_TYPE_LATEST, Exposition
    from ..server import privacy
    from ..server.service import GpuService

    hostname = args.hostname.strip() or socket.gethostname()
    service = GpuService(backend_choice=args.backend, interval_s=args.interval_s,
                         show_other_users_processes=args.show_other_users_processes)
    exposition = Exposition(hostname)
    me = None if args.show_other_users_processes else privacy.server_uid()

    def processes(snap: Any) -> Any:
        if me is None:
            return None
        return {d["index"]: None if d.get("processes") is None else
                [privacy.redact_process(p, me) for p in d["processes"]] for d in snap["devices"]}

    try:
        server = make_server(args.host, args.port, _app(lambda: exposition.scrape(service, processes), CONTENT_TYPE_LATEST),
                             server_class=_Server, handler_class=_QuietHandler)
    except OSError as exc:
        raise UsageError(f"cannot listen on {args.host}:{args.port}: {exc.strerror or exc}") from None
    stop = threading.Event()
    for sig in (signal.SIGTERM, signal.SIGINT):
        signal.signal(sig, lambda *_: stop.set())
    service.start_in_background()
    serving = threading.Thread(target=server.serve_forever, name="gpu-widgets-exporter", daemon=True)
    serving.start()
    try:
        service.wait_ready(READY_WAIT_S)
        print(_banner(server, args.host, service, choice), flush=True)
        while not stop.wait(1.0):
            pass
    finally:
        server.shutdown()
        server.server_close()
        service.stop()
        if service.sampler is not None:
            service.sampler.backend.close()  # NVML shut down before the process goes
    return 0


def _checked_backend(backend: str | None) -> str:
    try:
        choice = resolve_choice(backend)
        if choice == "simulated":
            simulated_from_env()  # a bad GPU_WIDGETS_SIMULATED_* setting is a usage error too
    except ConfigError as exc:
        raise UsageError(str(exc)) from None
    return choice


def _banner(server: WSGIServer, host: str, service: Any, choice: str) -> str:
    port = server.server_address[1]
    shown = f"[{host}]" if ":" in host else host
    status = service.status()
    if status["backend"] == "simulated" or (status["backend"] is None and choice == "simulated"):
        what = f"{status['device_count']} SIMULATED GPU(s) (not real hardware)"
    elif status["status"] == "ok":
        what = f"{status['device_count']} GPU(s) through NVML"
    else:
        what = f"no GPU yet ({status['status']}: {status['reason']})"
    return f"gpu-widgets exporter: serving http://{shown}:{port}/metrics with {what}"


def run(args: argparse.Namespace) -> int:
    try:
        return main(args)
    except UsageError as exc:
        print(f"gpu-widgets exporter: error: {exc}", file=sys.stderr)
        return 2
