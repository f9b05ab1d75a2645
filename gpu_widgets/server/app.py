"""The server extension application: its settings (documented traitlets) and its routes."""
from __future__ import annotations

import socket

from jupyter_server.extension.application import ExtensionApp
from traitlets import Bool, Float, Integer, Unicode, validate

from ..alerts.settings import AlertSettings
from ..backends import CHOICES
from ..cluster.settings import ClusterSettings
from ..sampling.sampler import DEFAULT_INTERVAL_S, DEFAULT_SLOW_INTERVAL_S, DEFAULT_WINDOW_S, MAX_SLOW_INTERVAL_S, MIN_INTERVAL_S
from ..service.service import GpuService
from ..settings_check import check_number
from .alerts_feed import AlertsFeed
from .alerts_handler import ENGINE_KEY, AlertSettingsHandler, AlertsHandler
from .cluster_handler import ClusterHandler
from .handlers import route_table
from .metrics_handler import ALLOW_KEY, HOSTNAME_KEY, metrics_route

API_PREFIX = "/gpu-widgets/api/v1"
# The sampler's settings: trait -> (is the value allowed, the rule in words)
SAMPLER_NUMBERS = {
    "interval_s": (lambda v: v >= MIN_INTERVAL_S, f"at least {MIN_INTERVAL_S} s"),
    "slow_interval_s": (lambda v: MIN_INTERVAL_S <= v <= MAX_SLOW_INTERVAL_S,
                        f"within {MIN_INTERVAL_S}-{MAX_SLOW_INTERVAL_S} s"),
    "window_s": (lambda v: v > 0, "a positive number of seconds"),
}


class GpuWidgets(AlertSettings, ClusterSettings, ExtensionApp):
    """Configure with ``c.GpuWidgets.<name>`` in a jupyter_server_config.py, or ``--GpuWidgets.<name>=``."""

    name = "gpu_widgets"
    load_other_extensions = True

    interval_s = Float(
        DEFAULT_INTERVAL_S,
        help=f"Seconds between two samples of every GPU (at least {MIN_INTERVAL_S}). One sampler serves every "
        "browser tab; no client can make it sample faster.",
    ).tag(config=True)
    slow_interval_s = Float(
        DEFAULT_SLOW_INTERVAL_S,
        help=f"Seconds between two reads of the slow fields (process list, PCIe throughput), at most {MAX_SLOW_INTERVAL_S}.",
    ).tag(config=True)
    window_s = Float(
        DEFAULT_WINDOW_S,
        help="Seconds of history kept in memory for the sidebar's charts. Memory is fixed by "
        "window_s / interval_s samples per GPU.",
    ).tag(config=True)
    show_other_users_processes = Bool(
        False,
        help="Show the name, user and command line of GPU processes that belong to other users (another "
        "real uid than the server's; $USER plays no part). Off by default: on a shared server they are "
        "listed with pid and GPU memory only.",
    ).tag(config=True)
    backend = Unicode(
        "",
        help=f"Where readings come from: one of {', '.join(CHOICES)}. Empty: the GPU_WIDGETS_BACKEND "
        "environment variable, else auto (NVML, or the no-GPU state with NVML's reason).",
    ).tag(config=True)
    max_points_limit = Integer(
        5000, help="The most points per device one samples request may ask for (max_points)."
    ).tag(config=True)
    max_response_points = Integer(
        32000,
        help="The most points one samples answer holds over all GPUs together: max_points is lowered to "
        "max_response_points // GPUs (the answer says so in its max_points). About 150 bytes a point, so the "
        "default keeps an answer near 5 MB however many GPUs and whatever the client asks.",
    ).tag(config=True)

    metrics_allow_unauthenticated = Bool(
        False,
        help="Serve {base_url}gpu-widgets/metrics (the Prometheus exposition) without the server's token. "
        "Risky: anyone who can reach the server then sees its GPUs, their load and the pids, users, kernel ids "
        "and notebook paths of the processes on them (other users' names stay hidden unless "
        "show_other_users_processes). Prefer a token in Prometheus's scrape config (docs/prometheus.md).",
    ).tag(config=True)
    freeze_gc_on_big_machines = Bool(
        True,
        help="Once a sample shows 1024 GPU processes or more, move the server's objects of that moment out "
        "of Python's full garbage collections (gc.freeze(), once per process): on a 64-GPU machine those "
        "passes otherwise hold the event loop 100-600 ms every few seconds. Off: Python's collector as usual.",
    ).tag(config=True)
    hostname = Unicode(
        "",
        help="The host name this server's GPUs are labelled with (the Hostname label of the Prometheus "
        "export). Empty: the machine's host name (socket.gethostname()).",
    ).tag(config=True)

    @validate(*SAMPLER_NUMBERS)
    def _check_sampler_number(self, proposal):  # type: ignore[no-untyped-def]
        trait = proposal["trait"].name
        allowed, rule = SAMPLER_NUMBERS[trait]
        return check_number(f"GpuWidgets.{trait}", proposal["value"], allowed, rule)

    @validate("backend")
    def _check_backend(self, proposal):  # type: ignore[no-untyped-def]
        value = proposal["value"].strip().lower()
        if value and value not in CHOICES:
            raise ValueError(f"GpuWidgets.backend={value!r} is not a backend: use one of {', '.join(CHOICES)}")
        return value

    def initialize_settings(self) -> None:
        self.service = GpuService(
            backend_choice=self.backend or None,
            interval_s=self.interval_s,
            slow_interval_s=self.slow_interval_s,
            window_s=self.window_s,
            show_other_users_processes=self.show_other_users_processes,
            max_points_limit=self.max_points_limit,
            max_response_points=self.max_response_points,
            log=self.log,
            freeze_gc_on_big_machines=self.freeze_gc_on_big_machines,
        )
        self.settings["gpu_widgets_service"] = self.service
        self.settings[HOSTNAME_KEY] = self.hostname.strip() or socket.gethostname()
        self.settings[ALLOW_KEY] = self.metrics_allow_unauthenticated
        # The cluster view names this server's host as its own export labels it. Bad cluster
        # settings make its answers an error, never the whole extension fail to load.
        self.settings["gpu_widgets_cluster"] = self.cluster_service(self.settings[HOSTNAME_KEY], self.log)
        # Opening NVML can take a second on a big server: never on the event loop.
        self.service.start_in_background()
        # Alerts: evaluated on the sampler thread once it runs; bad alert settings turn only them off.
        engine = self.settings[ENGINE_KEY] = self.alert_engine(self.log)
        self.alerts = AlertsFeed(self.service, engine, self.serverapp.kernel_manager,
                                 self.serverapp.session_manager, self.log)
        self.alerts.start()

    def initialize_handlers(self) -> None:
        # Before route_table: it ends with the API's catch-all 404.
        self.handlers.append((f"{API_PREFIX}/cluster", ClusterHandler))
        self.handlers.append((f"{API_PREFIX}/alerts", AlertsHandler))
        self.handlers.append((f"{API_PREFIX}/alerts/settings", AlertSettingsHandler))
        self.handlers.extend(route_table(API_PREFIX))
        self.handlers.append(metrics_route())

    async def stop_extension(self) -> None:
        alerts = getattr(self, "alerts", None)
        if alerts is not None:
            alerts.stop()
        service = getattr(self, "service", None)
        if service is not None:
            service.stop()
