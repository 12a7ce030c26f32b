"""A/B of the unstreamed matmul choice (ops/matmul.py) on the bench's training steps.

    python3 benchmarks/matmul_unstreamed_ab.py old|new

new: as shipped (a product that cannot stream takes the tuner's best without stream-K forms).
old: that choice is the stream-K winner again (it then runs its ordinary form, as before
2026-12-02). Runs `anygpu bench --only train`; run the two modes alternately, each in its own
process (each tunes afresh: the tuner's memo is per process).
"""

import sys

from anygpu.ops import matmul_tune
from anygpu.cli import main

if sys.argv[1:] not in (["old"], ["new"]):
    sys.exit(__doc__)
if sys.argv[1] == "old":
    matmul_tune.UNSTREAMED = matmul_tune.TUNABLES
sys.exit(main(["bench", "--only", "train"]))
