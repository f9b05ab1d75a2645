"""A real kernel of the test's Jupyter server that started a ``sleep`` child, as GPU work does
(DataLoader workers, ``!python`` jobs): the child's pid is what the fake NVML then lists."""
from __future__ import annotations

import json
from pathlib import Path
from typing import Any


async def kernel_with_child(jp_fetch: Any, jp_serverapp: Any, tmp_path: Path,
                            notebook: str | None = None) -> tuple[str | None, str, int]:
    """(session id, kernel id, the child's pid): a notebook's session at ``notebook``, else a bare kernel."""
    if notebook is None:
        reply = await jp_fetch("api", "kernels", method="POST", body=json.dumps({"name": "python3"}))
        session_id, kernel_id = None, json.loads(reply.body)["id"]
    else:
        session = json.loads((await jp_fetch("api", "sessions", method="POST", body=json.dumps(
            {"path": notebook, "type": "notebook", "name": notebook, "kernel": {"name": "python3"}}))).body)
        session_id, kernel_id = session["id"], session["kernel"]["id"]
    kc = jp_serverapp.kernel_manager.get_kernel(kernel_id).client()
    kc.start_channels()
    try:
        await kc.wait_for_ready(timeout=60)
        pid_file = tmp_path / f"{kernel_id}.pid"
        msg_id = kc.execute(f"import subprocess; _p = subprocess.Popen(['sleep', '300']); "
                            f"open({str(pid_file)!r}, 'w').write(str(_p.pid))")
        # This execute's own reply: a reply left from wait_for_ready's kernel_info may come first.
        while True:
            reply = await kc.get_shell_msg(timeout=60)
            if reply["parent_header"].get("msg_id") == msg_id:
                break
        assert reply["content"]["status"] == "ok", reply["content"]
    finally:
        kc.stop_channels()
    return session_id, kernel_id, int(pid_file.read_text())
