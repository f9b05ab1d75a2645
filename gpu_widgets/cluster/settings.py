"""The cluster view's settings, as traits the server extension's app inherits (``c.GpuWidgets.<name>``).

They are checked when the server extension starts (``cluster_service``), not as each is set: a bad
value turns the Cluster view into an error that names the setting, while the rest of the extension
(the local sidebar, the API, the metrics) loads as usual.
"""
from __future__ import annotations

import logging

from traitlets import Float, HasTraits, Unicode

from ..settings_check import check_number
from .prometheus import DEFAULT_MAX_ANSWER_MB, Auth, check_url
from .service import ClusterConfig, ClusterService

MIN_REFRESH_S = 1.0
MAX_TIMEOUT_S = 120.0
MAX_ANSWER_MB_LIMIT = 100.0  # tornado's own buffer limit for one answer


class ClusterSettings(HasTraits):
    prometheus_url = Unicode(
        "",
        help="The Prometheus server the sidebar's Cluster view reads (e.g. http://prometheus:9090, with a "
        "path prefix if it has one). It must scrape the hosts' gpu-widgets metrics or NVIDIA's dcgm-exporter. "
        "Empty: no cluster view. Credentials belong in prometheus_token or prometheus_username/_password.",
    ).tag(config=True)
    prometheus_token = Unicode(
        "", help="A bearer token sent to Prometheus (Authorization: Bearer ...). Empty: none."
    ).tag(config=True)
    prometheus_username = Unicode("", help="User name for HTTP basic auth to Prometheus. Empty: none.").tag(config=True)
    prometheus_password = Unicode("", help="Password for HTTP basic auth to Prometheus.").tag(config=True)
    cluster_refresh_s = Float(
        5.0,
        help=f"Seconds one answer from Prometheus is kept (at least {MIN_REFRESH_S:g}): every browser shares "
        "it, so Prometheus is asked once per refresh however many sidebars are open.",
    ).tag(config=True)
    prometheus_timeout_s = Float(
        5.0, help=f"Seconds to wait for Prometheus before the Cluster view says it cannot be reached (0-{MAX_TIMEOUT_S:g})."
    ).tag(config=True)

    cluster_max_answer_mb = Float(
        DEFAULT_MAX_ANSWER_MB,
        help="The most MB (10^6 bytes) read of one answer from Prometheus (more than 0, at most "
        f"{MAX_ANSWER_MB_LIMIT:g}). A larger one is cut off and the Cluster view says 'answer too large': it bounds "
        "the server's memory and the time a decode holds it (500 hosts x 8 GPUs answer about 0.5 MB).",
    ).tag(config=True)

    def cluster_config(self) -> ClusterConfig:
        """The settings as one value; a ValueError names the setting that is wrong and why."""
        url = self.prometheus_url.strip()
        if url:
            try:
                check_url(url)
            except ValueError as exc:
                raise ValueError(f"GpuWidgets.prometheus_url {exc}") from None
        check_number("GpuWidgets.cluster_refresh_s", self.cluster_refresh_s,
                     lambda v: v >= MIN_REFRESH_S, f"at least {MIN_REFRESH_S:g} s")
        check_number("GpuWidgets.prometheus_timeout_s", self.prometheus_timeout_s,
                     lambda v: 0 < v <= MAX_TIMEOUT_S, f"within 0-{MAX_TIMEOUT_S:g} s (more than 0)")
        check_number("GpuWidgets.cluster_max_answer_mb", self.cluster_max_answer_mb,
                     lambda v: 0 < v <= MAX_ANSWER_MB_LIMIT, f"within 0-{MAX_ANSWER_MB_LIMIT:g} MB (more than 0)")
        if self.prometheus_token and self.prometheus_username:
            raise ValueError("GpuWidgets.prometheus_token and GpuWidgets.prometheus_username are both set: "
                             "Prometheus takes one kind of credentials, choose bearer token or basic auth")
        if self.prometheus_password and not self.prometheus_username:
            raise ValueError("GpuWidgets.prometheus_password is set without GpuWidgets.prometheus_username")
        auth = Auth(self.prometheus_token, self.prometheus_username, self.prometheus_password)
        return ClusterConfig(url, auth, self.cluster_refresh_s, self.prometheus_timeout_s, self.cluster_max_answer_mb)

    def cluster_service(self, current_host: str, log: logging.Logger) -> ClusterService:
        """The Cluster view's service; with bad settings, one that answers their problem (logged once, here)."""
        try:
            return ClusterService(self.cluster_config(), current_host, log)
        except ValueError as exc:
            problem = f"{exc}. The Cluster view is off until the setting is fixed and the server restarted"
            log.error("gpu-widgets cluster view: %s", problem)
            return ClusterService(ClusterConfig(), current_host, log, problem=problem)
