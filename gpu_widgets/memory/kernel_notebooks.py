"""Which notebook each of this user's Jupyter kernels runs, asked of the Jupyter server that started
this kernel, so that the post-mortem names "the notebook holder.ipynb" rather than a kernel id.

The server is found through jupyter_server's runtime files (``list_running_servers``): the one
whose pid is an ancestor of this process, asked with the token it wrote there (or, where it wrote
none, the JupyterHub token a single-user server's kernels inherit). Its ``api/sessions`` answer is
read with no proxy, at most TIMEOUT_S per step and MAX_BYTES. Anything else (a kernel no server
started, a password-only server, a refusal, an answer in no expected form) gives an empty map:
the post-mortem then says "Jupyter kernel <id>", as before.
"""
from __future__ import annotations

import json
import os
import urllib.request
from collections.abc import Iterable
from typing import Any

TIMEOUT_S = 1.0
MAX_BYTES = 4 << 20
MAX_PATH = 1024


def notebook_paths(kernel_ids: Iterable[str]) -> dict[str, str]:
    """kernel id -> its session's notebook path, for those of ``kernel_ids`` this kernel's server
    knows; {} when there is no such server or it cannot be asked. Never raises."""
    wanted = {k for k in kernel_ids if isinstance(k, str) and k}
    if not wanted:
        return {}
    try:
        server = own_server()
        sessions = _sessions(server) if server is not None else None
    except Exception:  # an unreadable runtime file, a refused or slow request: the ids stand
        return {}
    paths: dict[str, str] = {}
    for session in sessions if isinstance(sessions, list) else ():
        kernel = session.get("kernel") if isinstance(session, dict) else None
        path = session.get("path") if isinstance(session, dict) else None
        if isinstance(kernel, dict) and kernel.get("id") in wanted and isinstance(path, str) and path:
            paths[kernel["id"]] = path[:MAX_PATH]
    return paths


def own_server() -> dict[str, Any] | None:
    """The runtime info of the Jupyter server this process descends from."""
    import psutil
    from jupyter_server.serverapp import list_running_servers

    servers = {info.get("pid"): info for info in list_running_servers() if isinstance(info, dict)}
    return next((servers[p.pid] for p in psutil.Process().parents() if p.pid in servers), None)


def _sessions(info: dict[str, Any]) -> Any:
    url = info.get("url")
    if not isinstance(url, str) or not url.startswith(("http://", "https://")):
        return None  # a server on a unix socket
    token = info.get("token") or os.environ.get("JUPYTERHUB_API_TOKEN")
    request = urllib.request.Request(url.rstrip("/") + "/api/sessions",
                                     headers={"Authorization": f"token {token}"} if token else {})
    # No proxy: HTTP_PROXY without NO_PROXY would send the token for loopback to the proxy.
    opener = urllib.request.build_opener(urllib.request.ProxyHandler({}))
    with opener.open(request, timeout=TIMEOUT_S) as answer:
        body = answer.read(MAX_BYTES + 1)
    return json.loads(body) if len(body) <= MAX_BYTES else None
