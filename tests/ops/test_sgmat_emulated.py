"""The subgroup-matrix matmul family's emulated kernels (ops/sgmat.py, generate(...,
emulate=True)): the same WGSL with each subgroup-matrix load, multiply-accumulate and store
written as scalar code, so that every index, bound check, transposed and 16-byte load, the
epi store through the dead tiles (vec4 stores included), the direct store, the single-stage
form and the bias, alpha and f16 conversion of the real kernels run on an adapter without
matrix units (lavapipe in CI), against float64.

The values of the real kernels are checked only where the adapter has matrix units
(tests/ops/test_sgmat.py, Dawn on a GPU). The emulated kernels run on Dawn: in a child under
ANYGPU_RUNTIME=dawn where this process runs on wgpu-native (test_emulated_kernels_on_dawn),
as tests/ops/test_conv_sgmat.py runs the convolutions' emulated kernels.
"""

from __future__ import annotations

import hashlib

import numpy as np
import pytest

import dawn_child  # (tests/ops/dawn_child.py)
from sgmat_operands import operands  # (tests/ops/sgmat_operands.py)
from anygpu.ops import gpu, sgmat
from anygpu.ops.matmul_problem import Problem
from anygpu.ops.sgmat import SgConfig


# Small members (lavapipe compiles one layout of these in 1-5 s): two stages and one, wide
# tiles with the epi store (in rounds of one matrix with one stage, of 3 and 1 with two),
# scalar tiles with the sC scratch, one matrix step per k step and two.
MEMBERS = [SgConfig.parse(name) for name in (
    "sg16x16x16s32_w2x2_t2x2_k32_v_e_s", "sg16x16x16s32_w2x2_t2x2_k32_v_e",
    "sg16x16x16s32_w2x2_t2x2_k32", "sg16x16x16s32_w2x2_t1x2_k16_s")]
# Slotted members (each subgroup's tile rows in a slot of their own, matrix loads at literal offsets),
# the last with the next k step prefetched into registers (_p).
SLOTTED = [SgConfig.parse(name) for name in (
    "sg16x16x16s32_w2x2_t2x2_k32_v_e_s_c", "sg16x16x16s32_w1x2_t2x1_k16_v_e_s_c",
    "sg16x16x16s32_w2x2_t2x2_k32_v_e_s_c_p")]

# (problem, result type, bias). Tiles of 64 x 64 (32 x 64 for the last member): edge tiles in
# m, n and k; rows of 8 halves (16-byte loads) or not; n % 4 == 0 with edge tiles (the epi
# store's vec4 form, its columns past n) or not; batches with one operand shared; the direct
# f32 store (whole tiles, alpha 1, no bias).
PROBLEMS = [
    (Problem(1, 130, 70, 45), "f16", True),                                     # 1-half loads
    (Problem(2, 200, 136, 72, True, False), "f16", True),                       # A^T, vec4 store, edge n
    (Problem(1, 77, 65, 384, False, True, alpha=0.5), "f32", False),            # B^T, alpha, scalar epi store
    (Problem(1, 65, 384, 77, True, True), "f16", True),                         # both transposed, 1-half loads
    (Problem(3, 96, 72, 40, a_batch=False, alpha=-1.5), "f32", True),           # A shared, vec4<f32> store
    (Problem(2, 64, 132, 48, False, True, b_batch=False), "f16", False),        # B^T shared, vec4<f16> store
    (Problem(2, 128, 128, 64), "f32", False),                                   # the direct store
]
# One k step only, and four.
EXTRA = [(Problem(1, 70, 64, 24), "f16", True), (Problem(1, 64, 128, 128), "f32", False)]
# Which problems each member runs (each layout is a compile; the 20 take about 40 s on lavapipe
# without Mesa's shader cache): the wide members every problem with 16-byte rows, the scalar
# ones a spread.
RUNS = {MEMBERS[0].name: range(len(PROBLEMS)), MEMBERS[1].name: (1, 2, 4, 5, 6),
        MEMBERS[2].name: (0, 1, 3, 6), MEMBERS[3].name: (0, 2, 3, 5),
        SLOTTED[0].name: (1, 2, 4, 5, 6, 8), SLOTTED[1].name: (1, 2, 4, 6, 7), SLOTTED[2].name: (1, 2, 4, 7, 8)}
CASES = [(name, i) for name, runs in RUNS.items() for i in runs]


def _check(config: SgConfig, problem: Problem, out: str, with_bias: bool, seed: int) -> None:
    """The emulated kernel of `config` through sgmat.launch against float64, every element
    of C written once and nothing past it."""
    dev = gpu()
    p = problem
    a, b, bias, want = operands(p, with_bias, seed)
    size, tail = p.batch * p.m * p.n, 64
    host = np.float16 if out == "f16" else np.float32
    c = dev.upload(np.full(size + tail, np.nan, host))        # NaN: an element never written
    sgmat.launch(dev, config, p, dev.upload(a.ravel()), dev.upload(b.ravel()), c,
                 None if bias is None else dev.upload(bias), emulate=True)
    got = dev.read(c).astype(np.float64)
    lay = sgmat.layout(config, p, out, with_bias)
    assert np.isnan(got[size:]).all(), f"{config.name} {lay}: wrote past C's end"
    err = np.abs(got[:size].reshape(want.shape) - want)
    worst = np.unravel_index(np.argmax(np.where(np.isnan(err), np.inf, err)), err.shape)
    rel = float(np.nanmax(np.where(np.isnan(err), np.inf, err)) / np.abs(want).max())
    assert rel < (2e-3 if out == "f16" else 1e-5), \
        f"{config.name} {lay}: relative error {rel:.3g}, worst at (z, row, col) {worst}"


@pytest.mark.skipif(dawn_child.reason() is not None, reason=dawn_child.reason() or "")
@pytest.mark.parametrize("name, problem", CASES, ids=[f"{n}-{i}" for n, i in CASES])
def test_emulated_kernel_matches_float64(name, problem):
    _check(SgConfig.parse(name), *(PROBLEMS + EXTRA)[problem], seed=problem)


@pytest.mark.skipif(not dawn_child.HAS_DAWN, reason="needs the extra anygpu[dawn]")
def test_emulated_kernels_on_dawn():
    """Where this process runs on wgpu-native, the tests above run in a child on Dawn (same
    adapter); skipped where Dawn gets no adapter."""
    dawn_child.run_tests(__file__, "emulated_kernel_matches")


def test_emulated_source_uses_no_subgroups():
    config = MEMBERS[1]
    for problem, out, bias in PROBLEMS:
        lay = sgmat.layout(config, problem, out, bias)
        real, emulated = sgmat.generate(config, lay), sgmat.generate(config, lay, True)
        assert "enable chromium_experimental_subgroup_matrix;" in real and "subgroupMatrixLoad" in real
        assert "subgroup" not in emulated, lay


# The real kernels' text of a spread of members and layouts, as it was before the emulated
# form came (one digest). The emulated form must leave it alone; a deliberate change of the
# real kernels updates the digest.
REAL_SOURCES_SHA256 = "48b1d249ac8edbcddbf8c618500c2bde79c05b4edd3579c70fa0718c84d7e9b0"


# (session 16's PREFERRED, so that a new default leaves the digest alone)
DIGEST_MEMBERS = ("sg16x16x16s32_w4x2_t2x4_k64_v_e_s", "sg16x16x16s32_w2x4_t4x2_k32_v_e_s",
                  "sg16x16x16s32_w2x2_t4x4_k32_v_e", "sg16x16x16s32_w2x4_t4x2_k32", "sg16x16x16s32_w4x2_t2x4_k32",
                  "sg16x16x16s32_w2x4_t4x4_k16", "sg16x16x16s32_w2x2_t2x2_k32")


def _real_sources_digest(generate) -> str:
    names = [c.name for c in MEMBERS] + list(DIGEST_MEMBERS) + [
        "sg16x8x16s32_w2x4_t4x2_k32_v_e", "sg16x16x16s32_w2x4_t4x4_k16_v"]
    digest = hashlib.sha256()
    for name in names:
        config = SgConfig.parse(name)
        for problem, out, bias in PROBLEMS:
            for vec_c in (1, 4):
                lay = sgmat.layout(config, problem, out, bias)._replace(vec_c=vec_c)
                digest.update(generate(config, lay).encode())
    return digest.hexdigest()


def test_real_kernel_text_is_unchanged():
    assert _real_sources_digest(sgmat.generate) == REAL_SOURCES_SHA256
