"""The server extension application: its settings (documented traitlets) and its routes."""
from __future__ import annotations

import os
import socket

from jupyter_server.extension.application import ExtensionApp
from traitlets import Bool, Float, Integer, Unicode, validate

from ..alerts.settings import AlertSettings
from ..backends import CHOICES
from ..backends.device_files import ENV as DEVICE_DIR_ENV
from ..cluster.settings import ClusterSettings
from ..sampling.sampler import DEFAULT_INTERVAL_S, DEFAULT_SLOW_INTERVAL_S, DEFAULT_WINDOW_S, MAX_SLOW_INTERVAL_S, MIN_INTERVAL_S
from ..service.service import GpuService
from ..settings_check import check_number
from .alerts_feed import AlertsFeed
from .alerts_handler import ENGINE_KEY, AlertSettingsHandler, AlertsHandler
from .cluster_handler import ClusterHandler
from .cell_ledger import LEDGER_KEY, KernelLedger
from .cells_handler import CellSummaryHandler
from .gpu_activity import TRACKER_KEY, GpuActivity
from .handlers import route_table
from .kernel_events import KEY as KERNEL_EVENTS_KEY, DeathWatcher, KernelEvents, KernelEventsHandler
from .kernel_culling import KernelCuller, check_window
from .kill_handler import KillHandler
from .metrics_handler import ALLOW_KEY, HOSTNAME_KEY, SCRAPES_KEY, metrics_route
from .orphan_watch import BOOK_KEY, OrphanWatch

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
    cgroup_root = Unicode(
        "/sys/fs/cgroup",
        help="Where the cgroup v2 tree is mounted. The server's own cgroup (from /proc/self/cgroup) under it "
        "tells whether a kernel that died was killed by the container's memory limit (memory.events oom_kill, "
        "memory.max, memory.current); unreadable files leave that cause out.",
    ).tag(config=True)
    gpu_activity = Bool(
        True,
        help="Count GPU work as activity: while a GPU is busy (at least activity_busy_percent) with a process of "
        "this server (a kernel, its children, a terminal's children; never another user's), the server's last "
        "activity (/api/status, what JupyterHub's idle culler reads) and the busy kernel's advance, at most once "
        "a minute. See docs/jupyterhub.md.",
    ).tag(config=True)
    activity_busy_percent = Float(
        10.0, help="GPU utilization, in percent (0-100), from which a GPU counts as busy for gpu_activity."
    ).tag(config=True)
    cull_idle_gpu_kernels_after_s = Float(
        0.0,
        help="Shut down a kernel that holds at least alert_idle_kernel_memory_gib on GPUs it has not used, and "
        "ran no cell, for this many seconds (0: off; at least 1 s otherwise). Every tab is told, in the kernel "
        "events. See docs/jupyterhub.md.",
    ).tag(config=True)
    nvidia_device_dir = Unicode(
        "",
        help="Where the NVIDIA device files are (nvidia<minor>, nvidia-uvm, nvidia-caps/). In a container the "
        "driver reports host pids, and the local processes using each GPU are found by the files of this folder "
        "they hold open (docs/containers.md). Empty: $GPU_WIDGETS_NVIDIA_DEVICE_DIR, else /dev. When set, the "
        "server's kernels get it in that variable, so their monitors look in the same place.",
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

    @validate("nvidia_device_dir")
    def _check_device_dir(self, proposal):  # type: ignore[no-untyped-def]
        value = proposal["value"].strip()
        if value and not os.path.isabs(value):
            raise ValueError(f"GpuWidgets.nvidia_device_dir={value!r} must be an absolute path (the folder "
                             "holding nvidia0, nvidia-uvm, ...), or empty for /dev")
        return value

    @validate("activity_busy_percent")
    def _check_busy_percent(self, proposal):  # type: ignore[no-untyped-def]
        return check_number("GpuWidgets.activity_busy_percent", proposal["value"], lambda v: 0 <= v <= 100, "within 0-100")

    @validate("cull_idle_gpu_kernels_after_s")
    def _check_cull_window(self, proposal):  # type: ignore[no-untyped-def]
        value = check_number("GpuWidgets.cull_idle_gpu_kernels_after_s", proposal["value"],
                             lambda v: v == 0 or 1 <= v < float("inf"), "0 (off) or at least 1 s")
        return check_window(value)

    def initialize_settings(self) -> None:
        if self.nvidia_device_dir:
            # Read by the NVML backend here and in the kernels this server starts (they inherit it).
            os.environ[DEVICE_DIR_ENV] = self.nvidia_device_dir
            if not os.path.isdir(self.nvidia_device_dir):
                self.log.warning("gpu-widgets: GpuWidgets.nvidia_device_dir=%s is not a folder: GPU processes of "
                                 "a container cannot be found by their device files", self.nvidia_device_dir)
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
        # GPU work as activity, and the opt-in culling of kernels that hold GPU memory unused.
        culler = None
        if self.cull_idle_gpu_kernels_after_s > 0:
            culler = KernelCuller(self.cull_idle_gpu_kernels_after_s, self.alert_idle_kernel_memory_gib,
                                  self.serverapp, self.log)
        self.gpu_work = self.settings[TRACKER_KEY] = GpuActivity(
            self.service, self.serverapp, self.log, self.gpu_activity, self.activity_busy_percent, culler)
        self.gpu_work.start()
        # Each kernel's GPU memory, sample by sample: the cells' lines (cells_handler.py).
        self.cell_ledger = self.settings[LEDGER_KEY] = KernelLedger(
            self.service, self.serverapp.kernel_manager, self.log, self.slow_interval_s, self.window_s)
        self.cell_ledger.start()
        # Why a kernel died: events served at kernels/events (kernel_events.py).
        events = self.settings[KERNEL_EVENTS_KEY] = KernelEvents()
        self.death_watcher = DeathWatcher(self.serverapp.kernel_manager, self.serverapp.session_manager,
                                          self.service, events, self.cgroup_root, self.log)
        self.death_watcher.start()
        # GPU processes left by kernels that ended (orphan_of in processes; Kill).
        self.orphans = OrphanWatch(self.service, self.serverapp.kernel_manager, self.serverapp.session_manager, self.log)
        self.settings[BOOK_KEY] = self.orphans.book
        self.orphans.start()

    def initialize_handlers(self) -> None:
        # Before route_table: it ends with the API's catch-all 404.
        self.handlers.append((f"{API_PREFIX}/cluster", ClusterHandler))
        self.handlers.append((f"{API_PREFIX}/alerts", AlertsHandler))
        self.handlers.append((f"{API_PREFIX}/alerts/settings", AlertSettingsHandler))
        self.handlers.append((f"{API_PREFIX}/kernels/events", KernelEventsHandler))
        self.handlers.append((f"{API_PREFIX}/processes/(.*)/kill", KillHandler))
        self.handlers.append((f"{API_PREFIX}/cells/summary", CellSummaryHandler))
        self.handlers.extend(route_table(API_PREFIX))
        self.handlers.append(metrics_route())

    async def stop_extension(self) -> None:
        alerts = getattr(self, "alerts", None)
        if alerts is not None:
            alerts.stop()
        for part in ("gpu_work", "cell_ledger"):
            running = getattr(self, part, None)
            if running is not None:
                running.stop()
        orphans = getattr(self, "orphans", None)
        if orphans is not None:
            orphans.stop()
        watcher = getattr(self, "death_watcher", None)
        if watcher is not None:
            watcher.stop()
        scrapes = self.serverapp.web_app.settings.get(SCRAPES_KEY) if self.serverapp else None
        if scrapes is not None:
            scrapes.stop()  # no more renders ahead of scrapes
        service = getattr(self, "service", None)
        if service is not None:
            service.stop()
