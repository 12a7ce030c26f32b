"""The subgroup-matrix matmul family (ops/sgmat.py) on the autotuner (ops/tuner.py).

A product's problem tuple is ('f16', batch, m, n, k, trans_a, trans_b, a_batch, b_batch,
out, bias, alpha): out the result type ('f16' or 'f32'), bias whether a bias is added in the
store. Its bucket is matmul's (m, n, k each rounded to a power of two, the transpositions,
batch > 1) plus what changes the generated code besides the config: the result type, the
bias, alpha other than 1, and which operands are read 8 halves at a time (ops/sgmat.layout).

Candidates: the device's default member (sgmat.PREFERRED's first that the adapter allows:
what every product ran before tuning, so nothing changes untuned) first, then a shortlist of
the members that led some product of the H200 sweep and their neighbours (`SHORTLIST`), not
the adapter's whole family. Untuned the default runs: no size heuristic, since the sweep
measured only large products. Shipped defaults (tuned_defaults.json, 'nvidia-gpu') hold the
sweep's winners of nanoGPT's products; like any shipped default they seed the tuning (a
non-fallback one after its float64 check here) and are tuned over where the budget allows."""

from __future__ import annotations

import numpy as np

from . import matmul_tune, sgmat, tuner
from .matmul_problem import Problem

__all__: list[str] = []  # nothing here is a Device op

# Raised when the shortlist, the bucket or the generated code changes: cached winners are
# then tuned again. 2: the wide and single-stage members (session 13) and a new default.
# 3: the slotted members (_c, session 17) and a new default. 4: the prefetching members (_p, session 20).
VERSION = 4

# The members that led a product in benchmarks/sgmat_sweep.py on the H200 (docs/BENCHMARKS.md,
# sessions 11, 13, 17 and 20), then neighbours. Session 13: the wide members (_v: vec4<u32>
# workgroup tiles; _e: the f16 / bias store through the dead tiles) beat their plain forms on every
# product by 10-45%, and one stage of workgroup memory (_s) beat two by another 15-45%. Session 17,
# robustness on (as anygpu runs Dawn): each subgroup's tile rows in a slot of their own, so that
# matrix loads sit at literal offsets which Tint leaves unpredicated (_c), beat the same member
# without them by 10-70%. Session 20: the next k step's loads issued into registers before the
# multiplies (_p) -- the step's buckets tuned over this list picked a _p member in 10 of 15, and the
# step's products went from 8.19 to 7.64 ms (each dispatch timed alone, GPU timestamps).
SHORTLIST = (
    "sg16x16x16s32_w2x4_t4x2_k64_v_e_s_c",    # the default (untuned)
    "sg16x16x16s32_w2x2_t4x4_k32_v_e_s_c_p",  # fc / qkv / attention-projection forwards with bias
    "sg16x16x16s32_w2x4_t4x2_k64_v_e_s_c_p",  # the MLP projection's forward with bias
    "sg16x16x16s32_w4x2_t2x4_k64_v_e_s_c_p",  # the input gradients (NN, n = 384)
    "sg16x16x16s32_w4x4_t4x2_k32_v_e_s_c_p",  # split weight gradients (TN, batched)
    "sg16x16x16s32_w4x2_t2x4_k64_v_e_s_c",
    "sg16x16x16s32_w2x2_t4x4_k32_v_e_s_c",    # 4096^3: 204 / 209 (f32 / f16 out); its _p form 211 / 216
    "sg16x16x16s32_w2x4_t4x2_k64_v_e_s",      # the fc weight gradient's slices, the attention projection
    "sg16x8x8s32_w4x4_t2x2_k32_v_e",          # the 16x8 config
    "sg16x16x16s32_w2x4_t2x2_k32_v_e",        # smaller tiles: products that fill few workgroups, k = 64
    "sg16x16x16s32_w2x2_t2x2_k32_v_e",
    "sg16x16x16s32_w2x4_t4x2_k32",            # the sessions-11/12 default (plain tiles)
)
# An adapter whose matrix configs or subgroup size allow fewer shortlisted members than this
# gets the first members of its own family (sgmat.candidates order) up to FILL_TO.
MIN_SHORTLIST, FILL_TO = 4, 8


def key(problem: Problem, out: str = "f16", bias: bool = False) -> tuple:
    """The tuner's problem tuple of a product with result type `out` and a bias or not."""
    if out not in ("f16", "f32"):
        raise ValueError(f"sgmat: the result type must be f16 or f32, got {out!r}")
    return ("f16", *problem[:8], out, bool(bias), float(problem.alpha))


def product(p: tuple) -> Problem:
    """The product of a problem tuple."""
    return Problem(*p[1:9], alpha=p[11])


def shortlist(allowed: list) -> list:
    """The tuner's members among `allowed` (the adapter's family), in SHORTLIST order."""
    by_name = {c.name: c for c in allowed}
    found = [by_name[name] for name in SHORTLIST if name in by_name]
    if len(found) < MIN_SHORTLIST:
        found += [c for c in allowed if c not in found][:max(FILL_TO - len(found), 0)]
    return found


def loads(p: tuple) -> str:
    """Which operands are read 8 halves at a time: 'vec8' both, 'vec8a'/'vec8b' one, 'scalar'."""
    q = product(p)
    vec_a = (q.m if q.trans_a else q.k) % 8 == 0
    vec_b = (q.k if q.trans_b else q.n) % 8 == 0
    return "vec8" if vec_a and vec_b else "vec8a" if vec_a else "vec8b" if vec_b else "scalar"


class SgmatTunable(tuner.Tunable):
    """f16 products on matrix units."""

    name = "sgmat"
    version = VERSION
    tune_from = {"gpu": 1 << 22, "cpu": 1 << 62}   # flops, as matmul's (no matrix units on CPUs)
    rtol = 2e-3  # an f16 result carries one f16 rounding beside f32 sums

    def bucket(self, p) -> str:
        """e.g. 'f16-f16out-m16384-n1024-k512-NT-vec8-single-bias'."""
        q, pow2 = product(p), tuner.pow2
        return (f"f16-{p[9]}out-m{pow2(q.m)}-n{pow2(q.n)}-k{pow2(q.k)}-"
                f"{'T' if q.trans_a else 'N'}{'T' if q.trans_b else 'N'}-{loads(p)}-"
                f"{'batched' if q.batch > 1 else 'single'}{'-bias' if p[10] else ''}"
                f"{'-alpha' if q.alpha != 1.0 else ''}")

    def work(self, p) -> float:
        return float(product(p).flops)

    def known(self, dev, p) -> list:
        """The default member, then the shortlist (the whole list for any problem)."""
        allowed = sgmat.allowed(dev)
        fallback = sgmat.preferred(allowed)
        if fallback is None:
            return []
        return [fallback] + [c for c in shortlist(allowed) if c != fallback]

    def candidates(self, dev, p) -> list:
        """known(), less members whose tile is far larger than the product."""
        q = product(p)
        found = self.known(dev, p)
        return found[:1] + [c for c in found[1:] if c.bm <= 2 * q.m and c.bn <= 2 * q.n]

    def label(self, config) -> str:
        return config.name

    def parse(self, label: str):
        return sgmat.SgConfig.parse(label)

    def inputs(self, p, rng) -> list[np.ndarray]:
        q = product(p)
        sizes = (q.a_len, q.b_len) + ((q.n,) if p[10] else ())
        return [(rng.random(size, dtype=np.float32) - np.float32(0.5)).astype(np.float16) for size in sizes]

    def run(self, dev, config, p, buffers):
        q = product(p)
        out = dev.empty(q.batch * q.m * q.n, p[9])
        sgmat.launch(dev, config, q, buffers[0], buffers[1], out, buffers[2] if p[10] else None)
        return out

    def reference(self, p, arrays) -> np.ndarray:
        got = matmul_tune.reference(product(p), arrays[0], arrays[1])
        return got + arrays[2].astype(np.float64) if p[10] else got

    def small_for(self, config, p):
        """A product NumPy does quickly that generates the same code under `config`: each
        size keeps its remainder modulo the config's tile (so the same edge handling, direct
        store and 8-half loads: tiles are multiples of 8), k spans at least two k steps."""
        q = product(p)

        def shrink(size: int, tile: int, steps: int) -> int:
            return size if size <= steps * tile else steps * tile + size % tile
        small = Problem(min(q.batch, 2), shrink(q.m, config.bm, 1), shrink(q.n, config.bn, 1),
                        shrink(q.k, config.tk, 2), q.trans_a, q.trans_b, q.a_batch, q.b_batch, q.alpha)
        return key(small, p[9], p[10])

    def sample(self, dev, out, p) -> np.ndarray:
        return matmul_tune.edge_rows(dev, out, product(p))


TUNABLE = SgmatTunable()


def choose(dev, problem: Problem, out: str = "f16", bias: bool = False):
    """The tuner's member for `problem` (the device's default member untuned)."""
    return tuner.choose(dev, TUNABLE, key(problem, out, bias))


def forget(dev, config, reason: str) -> None:
    """Mark `config` unusable on `dev` (it failed to compile or run); products of its
    buckets go back to the default member."""
    tuner.forget(dev, TUNABLE, config, reason)
