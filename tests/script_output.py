"""What gpu-widgets printed in a script's output, wherever the checkout, its virtual environment
and the temporary folders lie: their paths may well contain "gpu-widgets" (a clone's folder is
usually named so), and a traceback or a warning prints them."""
from __future__ import annotations

import re

_PATH = re.compile(r"\S*[/\\]\S*")  # a word with a slash in it: a file path or a URL


def our_lines(output: str) -> list[str]:
    """The lines of ``output`` that mention gpu-widgets outside a path: the ones our code printed."""
    return [line for line in output.splitlines() if "gpu-widgets" in _PATH.sub("", line)]
