"""``anygpu sample``: a PNG grid of images from a diffusion model, by DDIM in a few steps."""

from __future__ import annotations

import argparse
import time

import numpy as np

from anygpu.io.datasets import save_image_grid
from anygpu.train import modelfile

__all__ = ["DEFAULT_STEPS", "MAX_SAMPLES", "sample", "run"]

# DDIM at 8 of T = 200 steps already draws the starter model's 50-step grid closely
# (docs/STARTER.md); each step costs ~1.5 CPU-seconds per 32x32 image on lavapipe.
DEFAULT_STEPS = 8
MAX_SAMPLES = 256   # one batch; bounds the activations (256 x 2w x 32 x 32 floats per tensor)


def sample(model: modelfile.ModelFile, count: int, steps: int, seed: int) -> np.ndarray:
    """`count` images, float32 (count, C, H, W) in [-1, 1]; the same seed gives the same images."""
    import anygpu as ag
    from anygpu.train.diffusion import ddim_sample

    network = model.build()
    alpha_bar = np.cumprod(1.0 - model.betas())
    with ag.no_grad():
        return ddim_sample(network, alpha_bar, model.input_shape, count, steps, seed)


def run(args: argparse.Namespace) -> int:
    """The ``anygpu sample`` command."""
    import anygpu as ag
    from anygpu.infer import starter_model_path

    path = args.model if args.model is not None else starter_model_path()
    if args.n > MAX_SAMPLES:
        raise ValueError(f"sample: -n {args.n} is over {MAX_SAMPLES}; draw several grids with different --seed")
    model = modelfile.read(path)
    if model.stratagem != "diffusion":
        raise ValueError(f"sample: {path} is a {model.stratagem} model; sample needs a diffusion model "
                         f"(classify with 'anygpu predict {path} IMAGE')")
    steps = min(args.steps, model.diffusion["timesteps"])
    if args.out.is_dir():
        raise ValueError(f"sample: --out {args.out} is a folder; expected a file name such as samples.png")
    started = time.perf_counter()
    images = sample(model, args.n, steps, args.seed)
    save_image_grid(images, args.out, value_range=(-1.0, 1.0))
    dev = ag.gpu()
    print(f"wrote {args.out}: {args.n} samples of {path.name}, {steps} DDIM steps, seed {args.seed}, "
          f"on {dev.adapter_name} ({dev.backend}) in {time.perf_counter() - started:.1f} s")
    return 0
