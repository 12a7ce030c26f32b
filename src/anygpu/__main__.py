"""``python -m anygpu``: the same as the ``anygpu`` command."""

import sys

from anygpu.cli import main

sys.exit(main())
