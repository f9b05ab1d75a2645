"""Jupyter server extension entry point.

Kept minimal until the REST API lands: it proves the extension is enabled and loads.
"""


def _load_jupyter_server_extension(server_app):
    server_app.log.info("gpu-widgets server extension loaded")
