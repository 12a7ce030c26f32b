"""Matmul configs chosen by the autotuner (ops/tuner.py): members of the generated
register-blocked family (ops/matmul_gen.py), the simple tiled kernel (config None,
kernels/matmul_tiled.wgsl) as the always-correct fallback first. f32 and f16 operands
are tuned apart (`TUNABLES`, one per dtype): f16 products (summed in f32 like f32 ones)
also try members that stage f16 tiles, which fit deeper k steps and double buffering,
and members that read f16 operands as u32 words (eight halves per 16-byte load).

Products are sorted into shape buckets: the dtype, m, n and k each rounded to a power of
two, the transpositions, whether every contiguous axis allows vec4 access, batch > 1.
Untuned (tuning off, no cache entry, a product too small to be worth timing) a size
heuristic picks the config. The float64 check runs a small product of the same code
variant as the full one (each size keeps its remainders); at full size the candidates'
first and last rows are compared with the simple kernel's."""

from __future__ import annotations

import numpy as np

from . import tuner
from .matmul_gen import FAMILY_VERSION, MatmulConfig, Problem, SIMPLE_TILE, launch

__all__: list[str] = []  # nothing here is a Device op

SIMPLE = "simple"  # how the fallback kernel (config None) is labelled in the cache

_parse = MatmulConfig.parse

# Candidates on GPUs: the members that led at some size in benchmarks/matmul_sweep.py on
# an H200 (2026-11-29, see benchmarks/results.md): 128-wide tiles with 8x8 or 8x16
# outputs per thread and register prefetch for large products (40 TFLOP/s, 0.79 of
# cuBLAS fp32), 64-wide double-buffered tiles around 1024, 32x32 tiles below 512.
# With whole-tile variants made as trusted modules (2026-12-01, docs/BENCHMARKS.md) the
# 128x256 tile with a 16-deep k step leads at 4096 (46.2 TFLOP/s, 0.90 of torch); its
# 256x128 transpose leads where the sizes are not tile multiples (edge-checked variants:
# 4095x4097x4093 at 33.6 TFLOP/s against 26.7, session 7's sweep).
GPU_CANDIDATES = tuple(_parse(name) for name in (
    "128x256x16_8x16_v4p", "256x128x16_8x16_v4p", "128x128x16_8x8_v4p", "128x256x8_8x16_v4p", "128x128x8_8x16_v4p",
    "256x128x8_16x8_v4p", "128x64x16_8x8_v4p", "128x128x8_8x8_v4p", "64x128x16_8x8_v4d", "64x64x16_8x8_v4d",
    "64x64x16_8x8_v4p", "32x32x16_4x4_v4",
))
# Stream-K forms (f32 whole-tile products; other products run the member's ordinary form):
# 132 workgroups, an H100/H200's multiprocessors. 4096^3 in 128x256 tiles is 3.88 waves of
# 132 (the last one 88% full, so 3% of the time idle); sharing the k steps evenly took it
# from 46.1 to 46.8 TFLOP/s on an H200, the 128x128 tile to 46.9 (2026-12-01,
# docs/BENCHMARKS.md). Offered for f32 only: f16 products would time the ordinary form again.
GPU_STREAM = tuple(_parse(name) for name in ("128x256x16_8x16_v4ps132", "128x128x16_8x8_v4ps132"))
# CPU adapters (lavapipe): few candidates, since each compiles slowly and runs slowly.
CPU_CANDIDATES = tuple(_parse(name) for name in (
    "128x128x8_8x16_v4p", "128x128x8_8x8_v4p", "64x64x8_8x8_v4p",
))
# f16 operands take half the workgroup memory when staged as f16 ('h') and half the
# registers while prefetched: deeper k steps and double buffering of the 128-wide tiles,
# beside the f32 list (f16 read, staged as f32).
# Members ending in 'w' read f16 operands as u32 words (eight halves per 16-byte load,
# widened with unpack2x16float into the f32 tiles, so the f32 inner loop) where the
# contiguous axis is a multiple of 8: the f32/f16 leaders of the H200 sweep, and the f32
# winner with a 16-deep k step (two threads per 32-byte row segment of A).
GPU_F16_EXTRA = tuple(_parse(name) for name in (
    "128x128x32_8x8_v4p", "128x128x16_8x8_v4d", "128x128x16_8x8_v4ph", "128x128x32_8x8_v4ph",
    "128x128x16_8x8_v4dh", "128x128x32_8x8_v4dh", "128x256x16_8x16_v4ph", "256x128x16_16x8_v4ph",
    "128x256x8_8x16_v4pw", "128x256x16_8x16_v4pw", "128x128x16_8x8_v4pw", "128x64x16_8x8_v4pw",
    "64x64x16_8x8_v4dw", "128x128x8_8x16_v4pw",
))
CPU_F16_EXTRA = tuple(_parse(name) for name in ("64x64x16_8x8_v4dh",))

# Raised when a dtype's candidate lists (or its buckets) change, so its cached winners
# are tuned again (f16: 1 = word-load members and the vec8 bucket, 2 = 256x128x16_8x16_v4p;
# f32: 2 = 128x256x16_8x16_v4p, 3 = 256x128x16_8x16_v4p, 4 = the stream-K forms).
# A tunable's version is FAMILY_VERSION plus this: keep f32's and f16's apart.
CANDIDATES_VERSION = {"f32": 4, "f16": 2}

# Products below these flop counts take the simple kernel untuned (one pipeline for every
# shape, so no compile per shape variant).
SIMPLE_BELOW = {"gpu": 1 << 20, "cpu": 1 << 24}


def fits(dev, config: MatmulConfig | None) -> bool:
    """Whether the device's limits allow `config` (the simple kernel always fits)."""
    if config is None:
        return True
    limits = dev.limits
    return (not config.problems(limits.get("max-compute-invocations-per-workgroup", 256),
                                dev.max_workgroup_storage)
            and config.threads_x <= limits.get("max-compute-workgroup-size-x", 256)
            and config.threads_y <= limits.get("max-compute-workgroup-size-y", 256))


def heuristic(dev, problem: Problem) -> MatmulConfig | None:
    """A config chosen from the size alone (no timing). On GPUs it follows what the H200
    sweep measured: enough 128x128 tiles to fill the machine twice over take 128-wide
    tiles (128x64 when k is short), about a wave takes 64x64, fewer take 32x32."""
    kind = tuner.adapter_kind(dev)
    if problem.flops < SIMPLE_BELOW[kind]:
        return None
    tiles = problem.batch * -(-problem.m // 128) * -(-problem.n // 128)
    if kind == "cpu":
        choice = "128x128x8_8x16_v4p" if tiles >= 4 else "64x64x8_8x8_v4p"
    elif tiles >= 256:
        choice = "128x128x16_8x8_v4p" if problem.k >= 512 else "128x64x16_8x8_v4p"
    elif tiles >= 32:
        choice = "64x64x16_8x8_v4d"
    else:
        choice = "32x32x16_4x4_v4"
    config = _parse(choice)
    if not fits(dev, config):   # a small device: the largest tile family member that fits
        config = _parse("64x64x16_8x8_v4p")
    return config if fits(dev, config) else None


def small_problem(config: MatmulConfig | None, problem: Problem) -> Problem:
    """A product small enough for NumPy that generates the same code as `problem`:
    each size keeps its remainder modulo the tile (so the same bounds checks) and
    modulo 4 and 8 (so the same vec4 and word choices: tiles are powers of two of 8 or
    more where words are read), and k spans at least two k steps."""
    tile_m, tile_n, tile_k = ((SIMPLE_TILE, SIMPLE_TILE, 16) if config is None
                              else (config.tile_m, config.tile_n, config.tile_k))

    def shrink(size: int, tile: int, steps: int) -> int:
        return size if size <= steps * tile else steps * tile + size % tile
    return Problem(min(problem.batch, 2), shrink(problem.m, tile_m, 1), shrink(problem.n, tile_n, 1),
                   shrink(problem.k, tile_k, 2), problem.trans_a, problem.trans_b, problem.a_batch,
                   problem.b_batch, problem.alpha)


def reference(problem: Problem, a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """The product in float64 with NumPy: [batch, m, n]."""
    p = problem
    a_mat = a.astype(np.float64).reshape(-1, *((p.k, p.m) if p.trans_a else (p.m, p.k)))
    b_mat = b.astype(np.float64).reshape(-1, *((p.n, p.k) if p.trans_b else (p.k, p.n)))
    if p.trans_a:
        a_mat = a_mat.transpose(0, 2, 1)
    if p.trans_b:
        b_mat = b_mat.transpose(0, 2, 1)
    return p.alpha * np.broadcast_to(a_mat @ b_mat, (p.batch, p.m, p.n))


def edge_rows(dev, out, problem: Problem) -> np.ndarray:
    """The first rows of the first matrix and the last rows of the last one (from one
    element earlier where f16 copies must start on a 4-byte word)."""
    rows = min(problem.m, 8) * problem.n
    start = problem.batch * problem.m * problem.n - rows
    start -= (start * out.itemsize) % 4 // out.itemsize
    first = dev.read(dev.copy(out, n=rows, src_offset=0))
    last = dev.read(dev.copy(out, n=out.len - start, src_offset=start))
    return np.concatenate([first, last])


def key(problem: Problem, dtype: str = "f32") -> tuple:
    """The tuner's problem tuple of a product: (dtype, batch, m, n, k, trans_a, trans_b,
    a_batch, b_batch). alpha is left out: it is a parameter, the same code for every value."""
    return (dtype, *problem[:8])


def product(p: tuple) -> Problem:
    """The product of a tuner problem tuple (alpha 1)."""
    return Problem(*p[1:])


class MatmulTunable(tuner.Tunable):
    """Products of one operand dtype (f32 or f16)."""

    tune_from = {"gpu": 1 << 22, "cpu": 1 << 27}  # flops

    def __init__(self, dtype: str = "f32", stream: bool = True):
        self.dtype = dtype
        # stream=False: no stream-K forms among the candidates, for products that cannot
        # run them (an epilogue, or edge tiles: matmul_gen.streams) -- a stream-K winner
        # would run its ordinary form there, a 128-wide tile that may fill a few of the
        # GPU's multiprocessors (an MLP's 256x512 layer: 8 workgroups; H200 99 us where
        # a tuned plain tile takes far less).
        self.stream = stream
        # The generated code's version, plus the dtype's candidate list version: a new one
        # is tuned afresh.
        self.version = FAMILY_VERSION + CANDIDATES_VERSION[dtype]
        self.name = ("matmul" if dtype == "f32" else f"matmul {dtype}") + ("" if stream else " unstreamed")
        # Both lists of a dtype run the same products: a candidate timed for one counts for the other.
        self.family = f"matmul {dtype}"
        # f16 results carry one f16 rounding (2^-11 of the value) beside f32 summation.
        self.rtol = 2e-3 if dtype == "f16" else 1e-4

    def bucket(self, p) -> str:
        """e.g. 'f32-m1024-n1024-k512-NT-vec4-single'; f16 products whose operands allow
        word loads (contiguous axes multiples of 8) are 'vec8'."""
        q = product(p)
        pow2 = tuner.pow2
        a_contig, b_contig = (q.m if q.trans_a else q.k), (q.k if q.trans_b else q.n)
        aligned = a_contig % 4 == 0 and b_contig % 4 == 0 and q.n % 4 == 0
        words = self.dtype == "f16" and aligned and a_contig % 8 == 0 and b_contig % 8 == 0
        return (f"{p[0]}-m{pow2(q.m)}-n{pow2(q.n)}-k{pow2(q.k)}-{'T' if q.trans_a else 'N'}{'T' if q.trans_b else 'N'}-"
                f"{'vec8' if words else 'vec4' if aligned else 'scalar'}-{'batched' if q.batch > 1 else 'single'}")

    def work(self, p) -> float:
        return float(product(p).flops)

    def candidates(self, dev, p) -> list:
        """The simple kernel, then the family members that fit the device and whose tile
        is not far larger than the product."""
        q = product(p)
        return [config for config in self.known(dev, p)
                if config is None or (config.tile_m <= 2 * q.m and config.tile_n <= 2 * q.n)]

    def known(self, dev, p) -> list:
        """The device's whole list: a bucket spans sizes whose tile filters differ, and a
        winner tuned at one of them stays valid for the others."""
        cpu = tuner.adapter_kind(dev) == "cpu"
        pool = CPU_CANDIDATES if cpu else GPU_CANDIDATES
        if self.dtype == "f16":
            pool += CPU_F16_EXTRA if cpu else GPU_F16_EXTRA
        elif not cpu and self.stream:
            pool += GPU_STREAM
        return [None] + [config for config in pool if fits(dev, config)]

    def untuned(self, dev, p, fallback):
        return heuristic(dev, product(p))

    def label(self, config) -> str:
        return config.name if config is not None else SIMPLE

    def parse(self, label: str):
        return None if label == SIMPLE else _parse(label)

    def inputs(self, p, rng) -> list[np.ndarray]:
        q = product(p)
        host = np.float16 if p[0] == "f16" else np.float32
        return [(rng.random(size, dtype=np.float32) - np.float32(0.5)).astype(host) for size in (q.a_len, q.b_len)]

    def run(self, dev, config, p, buffers):
        q = product(p)
        out = dev.empty(q.batch * q.m * q.n, p[0])
        launch(dev, config, q, buffers[0], buffers[1], out)
        return out

    def reference(self, p, arrays) -> np.ndarray:
        return reference(product(p), *arrays)

    def small_for(self, config, p):
        return key(small_problem(config, product(p)), p[0])

    def sample(self, dev, out, p) -> np.ndarray:
        return edge_rows(dev, out, product(p))


TUNABLES = {dtype: MatmulTunable(dtype) for dtype in ("f32", "f16")}
TUNABLE = TUNABLES["f32"]
UNSTREAMED = {dtype: MatmulTunable(dtype, stream=False) for dtype in ("f32", "f16")}


def choose(dev, problem: Problem, dtype: str = "f32", stream: bool = True) -> MatmulConfig | None:
    """The config to run `problem` on `dtype` (f32 or f16) operands with on `dev` (None:
    the simple kernel). stream=False: among the configs without a stream-K form (for a
    product that cannot stream; see MatmulTunable)."""
    return tuner.choose(dev, (TUNABLES if stream else UNSTREAMED)[dtype], key(problem, dtype))


def forget(dev, config: MatmulConfig, reason: str, dtype: str = "f32") -> None:
    """Mark `config` unusable for `dtype` operands on `dev` (it failed to compile or run)."""
    tuner.forget(dev, TUNABLES[dtype], config, reason)
    tuner.forget(dev, UNSTREAMED[dtype], config, reason)
