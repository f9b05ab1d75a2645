"""torchrun's arguments, checked as torchrun reads them (its own parser), before a launch starts
anything (monitor/launcher.py, ``gpu_widgets.launch``). torch is imported here only when asked.
"""
from __future__ import annotations

import os
from pathlib import Path
from typing import Any

NPROC_WORDS = ("auto", "cpu", "gpu", "xpu")  # what torchrun's --nproc_per_node takes besides a number


def torchrun_args(args: Any, nproc_per_node: int | str | None) -> tuple[list[str], str]:
    """torchrun's argument list and the script it runs, checked the way torchrun reads them (its
    own parser: needs torch), before anything starts."""
    if isinstance(args, (str, os.PathLike)):
        if nproc_per_node is None:
            raise TypeError("with a script path alone, say how many ranks: "
                            "launch('train.py', nproc_per_node=2), or give torchrun's arguments as a list")
        args = [os.fspath(args)]
    elif isinstance(args, (list, tuple)):
        bad = [a for a in args if not isinstance(a, (str, os.PathLike))]
        if bad:
            raise TypeError(f"args is a list of strings (torchrun's arguments, the script, its arguments); "
                            f"{bad[0]!r} ({type(bad[0]).__name__}) is not")
        args = [os.fspath(a) for a in args]
    else:
        raise TypeError(f"args is a list of strings (torchrun's arguments, the script, its arguments) or a "
                        f"script path, got {type(args).__name__}")
    if nproc_per_node is not None:
        ok = (type(nproc_per_node) is int and nproc_per_node >= 1) or nproc_per_node in NPROC_WORDS
        if not ok:
            raise ValueError(f"nproc_per_node is a whole number >= 1 or one of {', '.join(NPROC_WORDS)}, "
                             f"got {nproc_per_node!r}")
        args = [f"--nproc_per_node={nproc_per_node}", *args]
    try:
        from torch.distributed.run import get_args_parser  # here only: importing gpu_widgets stays cheap
    except ImportError as exc:
        raise ImportError(f"gpu_widgets.launch runs torchrun, which needs PyTorch ({exc})") from exc
    parser = get_args_parser()

    def refuse(message: str) -> None:  # argparse would print and exit the kernel
        raise ValueError(f"torchrun would refuse these arguments: {message}")

    parser.error = refuse  # type: ignore[method-assign]
    parsed = parser.parse_args(args)
    if nproc_per_node is not None and sum(a.split("=")[0] in ("--nproc_per_node", "--nproc-per-node")
                                          for a in args) > 1:
        raise ValueError("nproc_per_node is given twice: as an argument of launch() and in args")
    script = parsed.training_script
    if not parsed.module and not parsed.no_python and not Path(script).is_file():
        raise FileNotFoundError(f"the script {script!r} is not a file (looked from {os.getcwd()})")
    return args, script
