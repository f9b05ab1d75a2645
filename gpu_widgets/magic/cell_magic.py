"""``%gpu_cells``: the notebook's GPU bill (cell_bill.py), from the cells this kernel ran since
``%load_ext gpu_widgets`` (cell_book.py)."""
from __future__ import annotations

from typing import Any

from IPython.core.error import UsageError
from IPython.core.magic import Magics, line_magic, magics_class
from IPython.core.magic_arguments import argument, magic_arguments, parse_argstring

from . import cell_bill
from .cell_book import CellBook


def _positive(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise ValueError(f"expected a whole number of cells, got {text!r}") from None
    if not 1 <= value <= 5000:
        raise ValueError(f"expected 1 to 5000 cells, got {value}")
    return value


_positive.__name__ = "number of cells"  # what argparse names in its message


@magics_class
class GpuCellsMagics(Magics):
    book: CellBook | None = None

    @magic_arguments()
    @argument("--last", type=_positive, default=500, metavar="N", help="the last N cells that ran (default 500)")
    @argument("--local", action="store_true",
              help="this kernel's own sampler, even where a Jupyter server has the figures")
    @line_magic
    def gpu_cells(self, line: str = "") -> Any:
        """%gpu_cells: the cells that used a GPU (duration, GPUs, peak memory, energy) and a total."""
        try:
            args = parse_argstring(self.gpu_cells, line)
        except UsageError as error:
            raise UsageError(f"%gpu_cells: {error}\nusage: %gpu_cells [--last N] [--local]") from None
        book = type(self).book
        if book is None:
            raise UsageError("%gpu_cells needs the extension: %load_ext gpu_widgets")
        cells = [c for c in book.cells if c.end is not None][-args.last:]
        server = None if args.local else cell_bill.own_server()
        kernel = cell_bill.kernel_id()
        if server is not None and kernel is not None:
            summaries = cell_bill.from_server(server, kernel, book, cells)
            source = f"figures from the Jupyter server at {server.get('url')}"
            if cells and all(s is None for s in summaries):
                source += " (it gave none: is the gpu_widgets server extension enabled there?)"
        else:
            if not book.watching:
                book.watch_locally()
                print("%gpu_cells: no Jupyter server for this kernel: its own sampler books its GPU memory "
                      "from now on (cells before have no figures)")
            summaries = cell_bill.from_book(book, cells)
            source = "figures from this kernel's own sampler (cells since it started watching)"
        bill = cell_bill.rows(cells, summaries)
        if getattr(self.shell, "kernel", None) is not None:
            from IPython.display import HTML, display

            display(HTML(cell_bill.as_html(bill, source)))
        else:
            print(cell_bill.as_text(bill, source))
        return None


def register(ipython: Any) -> None:
    book = CellBook(ipython)
    book.register()
    GpuCellsMagics.book = book
    ipython.register_magics(GpuCellsMagics)
    # Plain IPython: nobody else sees this process's GPU use, but the sampler is leased only when
    # %gpu_cells first asks (loading the extension starts no thread).


def unregister(ipython: Any) -> None:
    if GpuCellsMagics.book is not None:
        GpuCellsMagics.book.unregister()
        GpuCellsMagics.book = None
