"""Layer norm 4096-column rows at several row counts, f32 and f16, with the tuned kernel of the
4096x4096 problem: the time's fixed part (intercept of a line through 1024..8192 rows) and its
per-byte part; also the wall-clock time of one call with its synchronize (the GPU clock's check).
Run on the device after `anygpu bench --only norm` (so the tuner's choice is cached)."""
import numpy as np

from anygpu.bench.timing import time_anygpu
from anygpu.ops import Device, norm_tune

dev = Device()
rng = np.random.default_rng(0)
cols = 4096
for dtype, host in (("f32", np.float32), ("f16", np.float16)):
    config = norm_tune.choose(dev, (dtype, 4096, cols))
    name = getattr(config, "name", config)
    g, b = (dev.upload(rng.standard_normal(cols).astype(host), dtype) for _ in range(2))
    points = []
    for rows in (1, 16, 256, 1024, 2048, 4096, 8192):
        x = dev.upload(rng.standard_normal(rows * cols).astype(host), dtype)
        detail: dict = {}
        seconds = time_anygpu(dev, lambda: dev.layer_norm(x, g, b, rows, cols, 1e-5, config=config)[0], 0.1,
                              detail=detail)
        points.append((rows, seconds))
        print(f"{dtype} {name} rows {rows:5d}: {seconds * 1e6:8.2f} us GPU, {detail['wall_s_one_call'] * 1e6:8.1f} us wall"
              f" {2 * rows * cols * np.dtype(host).itemsize / seconds / 1e12:.2f} TB/s")
    big = [(r, s) for r, s in points if r >= 1024]
    slope, intercept = np.polyfit([r for r, _ in big], [s for _, s in big], 1)
    print(f"{dtype}: fit over 1024..8192 rows: {intercept * 1e6:.2f} us fixed + {slope * 4096 * 1e6:.2f} us per 4096 rows"
          f" ({2 * 4096 * cols * np.dtype(host).itemsize / (slope * 4096) / 1e12:.2f} TB/s marginal)")
