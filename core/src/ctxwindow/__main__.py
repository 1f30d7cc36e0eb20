"""``python -m ctxwindow``: the ``ctxwindow`` command."""

import sys

from ctxwindow._cli import main

sys.exit(main())
