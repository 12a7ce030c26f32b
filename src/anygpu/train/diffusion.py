"""``anygpu train diffusion``: a small DDPM on 32x32 RGB sprites.

Training (Ho et al. 2020): pick t uniformly in [0, T), noise the image,
x_t = sqrt(alpha_bar_t) x_0 + sqrt(1 - alpha_bar_t) eps, and regress eps with MSE.
The network is a small UNet: two resolutions down and up with residual blocks
(GroupNorm, SiLU, 3x3 convolutions), a sinusoidal time embedding through an MLP added in
every block, nearest-neighbour upsampling and concatenated skip connections.
Sampling uses DDIM's deterministic update (eta = 0) on an evenly strided subset of the
T steps, which is how a DDPM-trained model is usually sampled in fewer steps.
"""

from __future__ import annotations

import math
import time
from pathlib import Path
from typing import Any, Mapping

import numpy as np

import anygpu as ag
from anygpu import nn, optim
from anygpu.io.datasets import DataError, load_sprite_folder, make_sprites, save_image_grid
from anygpu.nn import functional as F
from anygpu.train import modelfile
from anygpu.train.loop import Settings

__all__ = ["TinyUNet", "ResBlock", "DiffusionTask", "ddim_sample", "sinusoidal_embedding", "linear_betas", "build_diffusion"]

SAMPLES = "samples.png"
IMAGE_SIZE = 32
DEFAULT_SPRITES = 2048
DEFAULT_TIMESTEPS = 200
DEFAULT_SAMPLE_STEPS = 50
DEFAULT_SAMPLES = 16
DEFAULT_WIDTH = 64  # 60 epochs give recognisable sprites in ~3 min on an H200 (docs/BENCHMARKS.md)
WARMUP_STEPS = 100


def linear_betas(timesteps: int) -> np.ndarray:
    """DDPM's linear schedule, scaled so that any T keeps the same overall noise
    (1e-4 .. 0.02 at T = 1000, as in Nichol & Dhariwal 2021). float64 (T,)."""
    scale = 1000.0 / timesteps
    return np.linspace(scale * 1e-4, min(scale * 0.02, 0.999), timesteps, dtype=np.float64)


def sinusoidal_embedding(timesteps: np.ndarray, dim: int) -> np.ndarray:
    """Transformer-style features of integer timesteps: float32 (N, dim), [sin | cos]."""
    half = dim // 2
    frequencies = np.exp(-math.log(10000.0) * np.arange(half, dtype=np.float64) / half)
    angles = np.asarray(timesteps, dtype=np.float64)[:, None] * frequencies[None, :]
    return np.concatenate([np.sin(angles), np.cos(angles)], axis=1).astype(np.float32)


def _groups(channels: int) -> int:
    return math.gcd(8, channels)


class ResBlock(nn.Module):
    """GroupNorm-SiLU-conv3x3, plus the time embedding per channel, GroupNorm-SiLU-conv3x3,
    plus the input (through a 1x1 conv when the width changes).

    x: (N, in_channels, H, W); time: (N, time_dim) -> (N, out_channels, H, W).
    """

    def __init__(self, in_channels: int, out_channels: int, time_dim: int):
        super().__init__()
        self.norm1 = nn.GroupNorm(_groups(in_channels), in_channels)
        self.conv1 = nn.Conv2d(in_channels, out_channels, 3, padding=1)
        self.time = nn.Linear(time_dim, out_channels)
        self.norm2 = nn.GroupNorm(_groups(out_channels), out_channels)
        self.conv2 = nn.Conv2d(out_channels, out_channels, 3, padding=1)
        self.projects = in_channels != out_channels
        if self.projects:
            self.skip = nn.Conv2d(in_channels, out_channels, 1)

    def forward(self, x: ag.Tensor, time: ag.Tensor) -> ag.Tensor:
        h = self.conv1(F.silu(self.norm1(x)))
        h = h + self.time(time).reshape(time.shape[0], -1, 1, 1)
        h = self.conv2(F.silu(self.norm2(h)))
        return h + (self.skip(x) if self.projects else x)


class TinyUNet(nn.Module):
    """Predicts the noise eps in x_t.

    forward(x, time_features): x (N, C, H, W) with H, W multiples of 4;
    time_features (N, width) from ``sinusoidal_embedding(t, width)`` -> (N, C, H, W).
    Resolutions H -> H/2 -> H/4 with widths w, 2w, 2w (stride-2 convolutions down,
    nearest-neighbour upsampling up, skips concatenated).
    """

    def __init__(self, channels: int = 3, width: int = DEFAULT_WIDTH, time_dim: int | None = None):
        super().__init__()
        time_dim = time_dim or 4 * width
        self.width = width
        self.time_dim = time_dim
        self.time_mlp = nn.Sequential(nn.Linear(width, time_dim), nn.SiLU(), nn.Linear(time_dim, time_dim))
        self.stem = nn.Conv2d(channels, width, 3, padding=1)
        self.enc1 = ResBlock(width, width, time_dim)
        self.down1 = nn.Conv2d(width, width, 3, stride=2, padding=1)
        self.enc2 = ResBlock(width, 2 * width, time_dim)
        self.down2 = nn.Conv2d(2 * width, 2 * width, 3, stride=2, padding=1)
        self.mid = ResBlock(2 * width, 2 * width, time_dim)
        self.dec2 = ResBlock(4 * width, 2 * width, time_dim)
        self.dec1 = ResBlock(3 * width, width, time_dim)
        self.norm_out = nn.GroupNorm(_groups(width), width)
        self.head = nn.Conv2d(width, channels, 3, padding=1)

    def forward(self, x: ag.Tensor, time_features: ag.Tensor) -> ag.Tensor:
        time = F.silu(self.time_mlp(time_features))
        skip1 = self.enc1(self.stem(x), time)                         # (N, w, H, W)
        skip2 = self.enc2(self.down1(skip1), time)                    # (N, 2w, H/2, W/2)
        h = self.mid(self.down2(skip2), time)                         # (N, 2w, H/4, W/4)
        h = F.interpolate(h, scale_factor=2, mode="nearest")
        h = self.dec2(ag.cat([h, skip2], dim=1), time)                # (N, 2w, H/2, W/2)
        h = F.interpolate(h, scale_factor=2, mode="nearest")
        h = self.dec1(ag.cat([h, skip1], dim=1), time)                # (N, w, H, W)
        return self.head(F.silu(self.norm_out(h)))                    # (N, C, H, W)


def ddim_sample(model: TinyUNet, alpha_bar: np.ndarray, shape, count: int, steps: int, seed: int) -> np.ndarray:
    """DDIM's deterministic update (eta = 0) from pure noise, over `steps` timesteps evenly
    strided from T - 1 down to 0 (T = len(alpha_bar)); the noise depends on `seed` alone.

    shape: (C, H, W) of one image. Returns float32 (count, C, H, W) in [-1, 1].
    """
    timesteps = len(alpha_bar)
    steps = max(1, min(int(steps), timesteps))
    rng = np.random.default_rng([seed, 0x5A3])
    x = ag.tensor(rng.standard_normal((count, *shape), dtype=np.float32))
    schedule = np.linspace(timesteps - 1, 0, steps).round().astype(np.int64)
    for index, t in enumerate(schedule):
        now = float(alpha_bar[t])
        following = float(alpha_bar[schedule[index + 1]]) if index + 1 < len(schedule) else 1.0
        features = ag.tensor(sinusoidal_embedding(np.full(count, t), model.width))
        eps = model(x, features)
        x0 = ((x - eps * math.sqrt(1.0 - now)) * (1.0 / math.sqrt(now))).clamp(-1.0, 1.0)
        # eps consistent with the clamped x0, so the next x_t stays on the schedule
        eps = (x - x0 * math.sqrt(now)) * (1.0 / math.sqrt(max(1.0 - now, 1e-12)))
        x = x0 * math.sqrt(following) + eps * math.sqrt(1.0 - following)
    return x.numpy().clip(-1.0, 1.0)


class DiffusionTask:
    """Epsilon-prediction MSE on unlabelled images in [-1, 1]; samples.png after every epoch."""

    scheduler_per_step = True
    has_test = False

    def __init__(self, images: np.ndarray, settings: Settings, source: str):
        if len(images) == 0:
            raise DataError(f"train diffusion: {source} holds no images")
        self.train_data = images
        self.source = source
        self.settings = settings
        self.timesteps = int(settings.extra.get("timesteps") or DEFAULT_TIMESTEPS)
        self.sample_steps = min(int(settings.extra.get("sample_steps") or DEFAULT_SAMPLE_STEPS), self.timesteps)
        self.n_samples = int(settings.extra.get("samples") or DEFAULT_SAMPLES)
        width = int(settings.extra.get("width") or DEFAULT_WIDTH)
        betas = linear_betas(self.timesteps)
        self.alpha_bar = np.cumprod(1.0 - betas)
        self.betas = betas
        self.model = TinyUNet(images.shape[1], width)
        self.optimizer = optim.AdamW(self.model.parameters(), lr=settings.lr)
        self.scheduler = optim.LinearWarmup(self.optimizer, warmup_steps=WARMUP_STEPS)
        self.extra_files: list[str] = []

    def describe(self) -> str:
        shape = "x".join(str(side) for side in self.train_data.shape[1:])
        return (f"{len(self.train_data)} {self.source} of {shape}, T = {self.timesteps}, "
                f"UNet width {self.model.width}, {self.sample_steps} sampling steps")

    def loss(self, x: np.ndarray, y: np.ndarray | None, rng: np.random.Generator) -> ag.Tensor:
        return self.loss_of(*self.inputs(x, y, rng))

    def inputs(self, x: np.ndarray, y: np.ndarray | None, rng: np.random.Generator) -> tuple:
        """The host part of a step: timesteps and noise drawn here, the batch as Tensors."""
        t = rng.integers(0, self.timesteps, size=len(x))
        noise = rng.standard_normal(x.shape, dtype=np.float32)
        signal = np.sqrt(self.alpha_bar[t]).astype(np.float32)[:, None, None, None]
        spread = np.sqrt(1.0 - self.alpha_bar[t]).astype(np.float32)[:, None, None, None]
        noisy = signal * x + spread * noise
        features = sinusoidal_embedding(t, self.model.width)
        return ag.tensor(noisy), ag.tensor(features), ag.tensor(noise)

    def loss_of(self, noisy: ag.Tensor, features: ag.Tensor, noise: ag.Tensor) -> ag.Tensor:
        return F.mse_loss(self.model(noisy, features), noise)

    def evaluate(self) -> dict[str, float]:
        return {}

    def sample(self, count: int, seed: int) -> np.ndarray:
        """DDIM (eta = 0) from pure noise over `sample_steps` strided steps: (count, C, H, W) in [-1, 1]."""
        return ddim_sample(self.model, self.alpha_bar, self.train_data.shape[1:], count, self.sample_steps, seed)

    def end_epoch(self, out: Path, epoch: int, last: bool) -> dict[str, Any]:
        # Every epoch, not only the last: sampling costs a few training steps' time, and
        # an interrupted run still leaves a picture of where it got to.
        started = time.perf_counter()
        images = self.sample(self.n_samples, self.settings.seed)
        save_image_grid(images, out / SAMPLES, value_range=(-1.0, 1.0))
        self.extra_files = [SAMPLES]
        return {"sample_seconds": time.perf_counter() - started, "sample_steps": self.sample_steps}

    def model_metadata(self) -> dict[str, str]:
        architecture = {"name": "tiny_unet", "channels": int(self.train_data.shape[1]), "width": self.model.width,
                        "time_dim": self.model.time_dim}
        return modelfile.diffusion_metadata(architecture, self.train_data.shape[1:], self.betas)

    def result(self, record: Mapping[str, Any]) -> str:
        return f"diffusion train loss {record['train_loss']:.4f} at {record['steps_per_second']:.2f} steps/s"


def build_diffusion(settings: Settings) -> DiffusionTask:
    if settings.data is not None:
        images = load_sprite_folder(settings.data, size=IMAGE_SIZE)
        source = f"images from {settings.data}"
    else:
        count = settings.limit or DEFAULT_SPRITES
        images = make_sprites(count, size=IMAGE_SIZE, seed=0)  # the data, not the run, is fixed
        source = "procedural sprites"
    if settings.limit is not None:
        images = images[: settings.limit]
    return DiffusionTask(images, settings, source)
