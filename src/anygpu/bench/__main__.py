"""`python -m anygpu.bench`: the benchmark suite without the rest of the command line."""

import sys

from anygpu.bench import main

sys.exit(main())
