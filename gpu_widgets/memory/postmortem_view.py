"""The post-mortem in the cell's output: the facts, and a **Free memory** button.

Shown once per error: by the monitor whose loop it left, else by the ``post_run_cell`` hook that
``%load_ext gpu_widgets`` registers (an ``_gpu_widgets_told`` mark on the exception says it was).
The NVML side comes from this process's sampler (recent_sample.py).
"""
from __future__ import annotations

import sys
from typing import Any

from ..widgets.header_css import HEADER_CSS
from .freeing import free_gpu_memory
from .postmortem import PostMortem, is_oom, post_mortem
from .recent_sample import recent_snapshot

TOLD = "_gpu_widgets_told"  # set on an exception whose post-mortem was shown


class PostMortemView:
    """The widget (facts, Free memory button, what freeing did) and its plain forms."""

    def __init__(self, pm: PostMortem) -> None:
        import ipywidgets as w

        self.pm = pm
        self.freed: Any = None  # the FreeReport once the button was pressed
        self.button = w.Button(description="Free memory", icon="recycle",
                               tooltip="drop what the failed cell keeps (traceback, cached outputs), collect, "
                                       "empty PyTorch's CUDA cache; your own names stay")
        self.result = w.HTML()
        self.button.on_click(self._free)
        self.widget = w.VBox([w.HTML(f'<style>{HEADER_CSS}</style><div class="gpuw-h">{pm.html()}</div>'),
                              self.button, self.result])

    def _free(self, _button: Any = None) -> None:
        self.button.disabled = True
        try:
            self.freed = free_gpu_memory()
            self.result.value = f'<div class="gpuw-h">{self.freed._repr_html_()}</div>'
        except Exception as exc:  # a button never raises into the front end's log only
            self.result.value = f"<div>free_gpu_memory() failed: {type(exc).__name__}: {exc}</div>"
        finally:
            self.button.disabled = False

    def _repr_mimebundle_(self, **kwargs: Any) -> dict[str, Any]:
        bundle = self.widget._repr_mimebundle_(**kwargs)
        bundle["text/plain"] = self.pm.text()
        bundle["text/html"] = f'<style>{HEADER_CSS}</style><div class="gpuw-h">{self.pm.html()}</div>'
        return bundle


def tell(exc: BaseException, *, in_kernel: bool, batch_size: int | None = None,
         fixed_bytes: float | None = None) -> PostMortem | None:
    """Show the post-mortem of ``exc`` once (None if it is no OOM or was told already). Never raises."""
    if not is_oom(exc) or getattr(exc, TOLD, False):
        return None
    try:
        setattr(exc, TOLD, True)
    except AttributeError:
        pass
    try:
        pm = post_mortem(exc, recent_snapshot(), batch_size, fixed_bytes)
        if in_kernel:
            from IPython.display import display

            display(PostMortemView(pm))
        else:
            print(pm.text(), file=sys.stderr)
        return pm
    except Exception as err:  # the user's own error is what matters: ours is one line
        print(f"gpu-widgets: no out-of-memory post-mortem ({type(err).__name__}: {err})", file=sys.stderr)
        return None
