"""Tune the bench's conv2d layer (3x3 64->64 56x56 batch 32) with a fresh cache and print every
candidate's time as the tuner measured it, and the choice (why the suite's row got what it got)."""
import os
import tempfile

os.environ["ANYGPU_CACHE_DIR"] = tempfile.mkdtemp()
from anygpu.ops import Device, conv_tune, tuner  # noqa: E402

dev = Device()
problem = ("f32", 32, 64, 56, 56, 64, 3, 3, (1, 1), (1, 1), (1, 1), 1)
op = conv_tune.TUNABLES["conv2d"]
result = tuner.tune(dev, op, problem)
for name, t in result.timings.items():
    print(f"{name:<24} {t * 1e6:9.1f} us" if isinstance(t, float) else f"{name:<24} {t}")
print("choice:", op.label(result.choice), "| choose():", op.label(tuner.choose(dev, op, problem)))
