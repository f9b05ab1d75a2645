"""``python -m gpu_widgets.cli``: the same as the ``gpu-widgets`` command."""
import sys

from . import main

sys.exit(main())
