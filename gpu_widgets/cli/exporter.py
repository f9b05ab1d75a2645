"""`gpu-widgets exporter`: the server's Prometheus exposition from a process of its own, for nodes
without Jupyter. One sampler; ``/metrics`` renders what it holds, like the server's endpoint, and
never calls the driver. SIGTERM and Ctrl-C stop it cleanly (exit 0, sampler stopped, NVML closed).

Served by tornado on one event-loop thread, renders on one worker thread: open connections cost
no thread (300 idle sockets used to hold 300 threads), and one that sends no request for
``--idle-timeout-s`` (headers included, so a slow trickle counts too) is closed.
"""
from __future__ import annotations

import argparse
import asyncio
import math
import signal
import socket
import sys
import threading
from concurrent.futures import ThreadPoolExecutor
from typing import Any, Callable

from ..backends import CHOICES, ConfigError, resolve_choice, simulated_from_env

DEFAULT_PORT = 9400  # dcgm-exporter's port: a node runs one or the other
# Every interface, as dcgm-exporter and node exporters listen: Prometheus scrapes from its own
# machine. There is no auth: docs/prometheus.md says how to restrict it (--host, a firewall).
DEFAULT_HOST = "0.0.0.0"
READY_WAIT_S = 10.0  # how long to wait for the backend before saying what it serves
# Longer than any scrape, shorter than a minute: Prometheus reconnects at its next scrape.
DEFAULT_IDLE_TIMEOUT_S = 30.0
MAX_IDLE_TIMEOUT_S = 3600.0
STOP_WAIT_S = 5.0


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
    p.add_argument("--idle-timeout-s", type=_idle_timeout, default=DEFAULT_IDLE_TIMEOUT_S, metavar="SECONDS",
                   help=f"close a connection that sends no (whole) request for this long "
                   f"(default {DEFAULT_IDLE_TIMEOUT_S:g})")


def _idle_timeout(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a number of seconds, got {text!r}") from None
    if not (math.isfinite(value) and 0 < value <= MAX_IDLE_TIMEOUT_S):
        raise argparse.ArgumentTypeError(f"must be more than 0 and at most {MAX_IDLE_TIMEOUT_S:g} seconds, got {text!r}")
    return value


class UsageError(Exception):
    """A bad argument found after parsing: the message says which and why."""


_PAGE = (b"<!doctype html><title>gpu-widgets exporter</title><h1>gpu-widgets exporter</h1>"
         b'<p><a href="metrics">/metrics</a>: the GPUs in dcgm-exporter\'s names.</p>')


def _application(scrape: Callable[[], bytes], content_type: str) -> Any:
    """The routes: ``/metrics`` (rendered on one worker thread, so the loop keeps serving), ``/``,
    plain-text errors for the rest. Imported here: the other commands never load tornado."""
    from tornado import web

    renders = ThreadPoolExecutor(1, thread_name_prefix="gpu-widgets-exporter-render")

    class Plain(web.RequestHandler):
        SUPPORTED_METHODS = ("GET", "HEAD")

        def write_error(self, status_code: int, **kwargs: Any) -> None:
            self.set_header("Content-Type", "text/plain")
            if status_code == 405:
                self.set_header("Allow", "GET, HEAD")
                self.finish(b"only GET\n")
            elif status_code == 404:
                self.finish(b"not found: the metrics are at /metrics\n")
            else:
                self.finish(b"internal error in gpu-widgets exporter\n")

        def compute_etag(self) -> None:
            return None

    class Metrics(Plain):
        async def get(self) -> None:
            body = await asyncio.get_running_loop().run_in_executor(renders, scrape)
            self.set_header("Content-Type", content_type)
            self.finish(body)

        head = get

    class Page(Plain):
        def get(self) -> None:
            self.set_header("Content-Type", "text/html; charset=utf-8")
            self.finish(_PAGE)

        head = get

    class NotFound(Plain):
        def prepare(self) -> None:
            raise web.HTTPError(404)

    # No access log: one line per scrape would drown the journal.
    app = web.Application([("/metrics", Metrics), ("/", Page)], default_handler_class=NotFound,
                          log_function=lambda handler: None)
    return app, renders


class _Serving:
    """The HTTP server on its own event-loop thread; ``stop`` closes every connection."""

    def __init__(self, sockets: list[socket.socket], app: Any, idle_timeout_s: float) -> None:
        self._sockets, self._app, self._idle = sockets, app, idle_timeout_s
        self._loop: asyncio.AbstractEventLoop | None = None
        self._stop: asyncio.Event | None = None
        self._up = threading.Event()
        self._thread = threading.Thread(target=lambda: asyncio.run(self._main()), name="gpu-widgets-exporter",
                                        daemon=True)

    def start(self) -> None:
        self._thread.start()
        self._up.wait(STOP_WAIT_S)

    async def _main(self) -> None:
        from tornado.httpserver import HTTPServer

        # idle_connection_timeout also bounds the wait for a request's headers (tornado's
        # header_timeout), so a connection that never sends one is closed too.
        server = HTTPServer(self._app, idle_connection_timeout=self._idle, body_timeout=self._idle)
        server.add_sockets(self._sockets)
        self._loop, self._stop = asyncio.get_running_loop(), asyncio.Event()
        self._up.set()
        await self._stop.wait()
        server.stop()
        await server.close_all_connections()

    def stop(self) -> None:
        if self._loop is not None and self._stop is not None:
            self._loop.call_soon_threadsafe(self._stop.set)
        self._thread.join(STOP_WAIT_S)


def main(args: argparse.Namespace) -> int:
    """Run until SIGTERM / Ctrl-C. Raises UsageError for bad arguments (the caller exits 2)."""
    choice = _checked_backend(args.backend)
    from tornado.netutil import bind_sockets

    from ..export.exposition import CONTENT_TYPE_LATEST, Exposition
    from ..export.families import exported_processes
    from ..service import privacy
    from ..service.service import GpuService

    hostname = args.hostname.strip() or socket.gethostname()
    service = GpuService(backend_choice=args.backend, interval_s=args.interval_s,
                         show_other_users_processes=args.show_other_users_processes)
    exposition = Exposition(hostname)
    me = privacy.full_view_uid(args.show_other_users_processes)

    def processes(snap: Any) -> Any:
        if me is None:
            return None
        # Only the processes that get a series are redacted (families.PROCESS_SERIES_MAX a GPU).
        return {d["index"]: None if d.get("processes") is None else
                [privacy.redact_process(p, me) for p in exported_processes(d["processes"]) or ()]
                for d in snap["devices"]}

    try:
        sockets = bind_sockets(args.port, args.host or None)
    except OSError as exc:
        raise UsageError(f"cannot listen on {args.host}:{args.port}: {exc.strerror or exc}") from None
    app, renders = _application(lambda: exposition.scrape(service, processes), CONTENT_TYPE_LATEST)
    serving = _Serving(sockets, app, args.idle_timeout_s)
    stop = threading.Event()
    for sig in (signal.SIGTERM, signal.SIGINT):
        signal.signal(sig, lambda *_: stop.set())
    service.start_in_background()
    serving.start()
    try:
        service.wait_ready(READY_WAIT_S)
        print(_banner(sockets[0].getsockname()[1], args.host, service, choice), flush=True)
        while not stop.wait(1.0):
            pass
    finally:
        serving.stop()
        renders.shutdown(wait=False, cancel_futures=True)
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


def _banner(port: int, host: str, service: Any, choice: str) -> str:
    shown = f"[{host}]" if ":" in host else host
    status = service.status()
    if status["backend"] == "simulated" or (status["backend"] is None and choice == "simulated"):
        what = f"{status['device_count']} SIMULATED GPU(s) (not real hardware)"
    elif status["status"] == "ok" or (status["status"] == "starting" and status["device_count"]):
        # "starting" only means the first sample is still being read: the GPUs are there
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
