"""``GET {base_url}gpu-widgets/api/v1/alerts[?since=<unix s>]``: the alert episodes.

Without ``since`` the answer is the engine's JSON of this version of the episodes, made once per
change for every tab, with a weak ETag: a poll that sends it back (``If-None-Match``, or a
browser revalidating with ``cache: 'no-cache'``) gets a bodiless 304 until something changes.
With ``since``, only the episodes that started, changed or ended after it.

``PUT {base_url}gpu-widgets/api/v1/alerts/settings``: new thresholds or GPU scope (any of the
fields of the answer's ``settings``), checked as the server's own traits are. They are the
server's: on a shared server every user's tabs see the alerts they decide. A body over
``MAX_SETTINGS_BYTES``, not one flat JSON object (json_body), or with a bad field is a 400 that
names the problem, and changes nothing.
"""
from __future__ import annotations

import json
import time

from tornado import web

from ..alerts import AlertEngine
from ..alerts.settings import FIELDS, check_thresholds
from ..settings_check import cut
from . import params
from .handlers import BaseApiHandler
from .json_body import BadBody, read_object

ENGINE_KEY = "gpu_widgets_alerts"
# Six short fields fit in a few hundred bytes; anything much bigger is a mistake, not settings.
MAX_SETTINGS_BYTES = 4096


class _AlertsApiHandler(BaseApiHandler):
    @property
    def engine(self) -> AlertEngine:
        return self.settings[ENGINE_KEY]


class AlertsHandler(_AlertsApiHandler):
    allowed_params = ("since",)

    @web.authenticated
    def get(self) -> None:
        self.check_params()
        with params.as_bad_request():
            since = params.unix_seconds(self.request.arguments, "since")
        self.set_header("Content-Type", "application/json")
        server_time = f',"server_time":{json.dumps(time.time())}}}'
        if since is not None:
            self.finish(json.dumps(self.engine.answer(since), allow_nan=False)[:-1] + server_time)
            return
        version, body = self.engine.body()
        # Revalidated, never reused unasked.
        self.set_header("Cache-Control", "private, no-cache")
        self.set_header("Etag", self.engine.etag(version))
        if self.check_etag_header():  # (tornado checks only the ETags it computes itself)
            self.set_status(304)
            self.finish()
            return
        self.finish(body + server_time)

    def compute_etag(self) -> None:
        return None  # set from the version where it applies; hashing each answer is wasted work


class AlertSettingsHandler(_AlertsApiHandler):
    @web.authenticated
    def put(self) -> None:
        self.check_params()
        engine = self.engine
        if not engine.enabled:
            why = engine.problem or "GpuWidgets.alerts_enabled is False on this server"
            raise web.HTTPError(409, f"the alerts are off ({why}): there are no thresholds to change",
                                reason="alerts_off")
        body = self.request.body
        if len(body) > MAX_SETTINGS_BYTES:
            raise params.bad_request(f"the body is {len(body):,} bytes; alert settings take at most "
                                     f"{MAX_SETTINGS_BYTES:,}")
        try:
            changes = read_object(body, "alert settings")
        except BadBody as exc:
            raise params.bad_request(f"{exc} (fields: {', '.join(FIELDS)})") from None
        if not changes:
            raise params.bad_request(f"the body must be a JSON object with at least one of: {', '.join(FIELDS)}")
        unknown = sorted(set(changes) - set(FIELDS))
        if unknown:
            named = ", ".join(cut(name) for name in unknown[:5])
            if len(unknown) > 5:
                named += f" and {len(unknown) - 5} more"
            raise params.bad_request(f"unknown alert setting(s) {named} (valid: {', '.join(FIELDS)})")
        try:
            limits = check_thresholds({**engine.settings(), **changes}, str)
        except ValueError as exc:
            raise params.bad_request(str(exc)) from None
        engine.set_limits(limits)
        self.log.info("gpu-widgets alerts: settings changed to %s", engine.settings())
        self.send(engine.settings())
