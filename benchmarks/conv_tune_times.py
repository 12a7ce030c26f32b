"""Every conv tile candidate of the generic tuner timed on the bench ResNet layer (conv2d,
its weight gradient and input gradient): python benchmarks/conv_tune_times.py."""
import json, anygpu as ag
from anygpu.ops import conv_tune, tuner
dev = ag.gpu()
out = {}
for kind, p in [("conv2d", ("f32", 32, 64, 56, 56, 64, 3, 3, (1, 1), (1, 1), (1, 1), 1)),
                ("conv2d_grad_weight", ("f32", 32, 64, 56, 56, 64, 3, 3, (1, 1), (1, 1), (1, 1), 1)),
                ("conv_transpose2d", ("f32", 32, 64, 56, 56, 64, 56, 56, 3, 3, (1, 1), (1, 1), (1, 1), 1))]:
    r = tuner.tune(dev, conv_tune.TUNABLES[kind], p)
    out[kind] = {"choice": conv_tune.TUNABLES[kind].label(r.choice), "timings_us": {k: (round(v * 1e6, 1) if isinstance(v, float) else v) for k, v in r.timings.items()}}
print(json.dumps(out, indent=1))
