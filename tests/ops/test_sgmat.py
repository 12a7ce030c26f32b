"""The subgroup-matrix matmul family (ops/sgmat.py): names, candidates, the route from f16
products, and -- where the adapter has matrix units (Dawn on a GPU) -- values against
float64 in every layout. On lavapipe there are no matrix units: the kernels' WGSL is then
checked by Dawn's compiler on its Null backend (a subprocess), and the route with a
recording stand-in for the launch."""

from __future__ import annotations

import importlib.util
import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from sgmat_operands import operands  # (tests/ops/sgmat_operands.py)

import anygpu as ag
from anygpu.ops import gpu, sgmat, sgmat_tune, tuner
from anygpu.ops.matmul_problem import Problem
from anygpu.runtime import GpuError

ROOT = Path(__file__).resolve().parents[2]
CONFIGS = [{"M": 16, "N": 16, "K": 16, "component_type": "f16", "result_type": "f32",
            "min_subgroup_size": 32, "max_subgroup_size": 32, "checked": True},
           {"M": 16, "N": 8, "K": 16, "component_type": "f16", "result_type": "f32",
            "min_subgroup_size": 32, "max_subgroup_size": 32, "checked": True}]


def test_config_names_round_trip_and_bad_names_are_errors():
    for c in sgmat.candidates(CONFIGS, 32, 1024, 49152):
        assert sgmat.SgConfig.parse(c.name) == c
        assert c.valid(1024, 49152)
    assert any(c.prefetch for c in sgmat.candidates(CONFIGS, 32, 1024, 49152))
    for bad in ("128x128x16_8x8", "sg16x16x16s32_w2x2_t2x2_k32_v_e_p", "sg16x16x16s32_w2x2_t2x2_k32_v_e_s_p_c"):
        with pytest.raises(ValueError, match="not a subgroup-matrix config name"):
            sgmat.SgConfig.parse(bad)   # _p needs the one stage (_s) and comes last


def test_candidates_respect_the_adapters_limits():
    small = sgmat.candidates(CONFIGS, 32, 256, 32768)
    assert small and all(c.threads <= 256 and c.workgroup_bytes() <= 32768 for c in small)
    assert len(small) < len(sgmat.candidates(CONFIGS, 32, 1024, 49152))
    assert sgmat.candidates([], 32) == []


def test_layout_takes_vector_loads_only_on_rows_of_whole_vectors():
    c = sgmat.SgConfig()
    lay = sgmat.layout(c, Problem(1, 256, 256, 384), "f32", False)
    assert (lay.vec_a, lay.vec_b, lay.direct) == (8, 8, True)
    lay = sgmat.layout(c, Problem(1, 256, 65, 384, False, True), "f16", True)   # B stored [65, 384]
    assert (lay.vec_a, lay.vec_b, lay.direct) == (8, 8, False)
    lay = sgmat.layout(c, Problem(1, 384, 65, 100, True, False), "f32", False)   # A^T rows of 384; B rows of 65
    assert (lay.vec_a, lay.vec_b, lay.direct) == (8, 1, False)
    assert not sgmat.layout(c, Problem(1, 256, 256, 384, alpha=0.5), "f32", False).direct


def test_f16_configs_need_one_fixed_subgroup_size_and_a_passed_check():
    class Dev:
        matrix_configs = CONFIGS
    assert sgmat.f16_configs(Dev())[1] == 32
    Dev.matrix_configs = [{**CONFIGS[0], "checked": False}]
    assert sgmat.f16_configs(Dev()) == ([], 0)
    Dev.matrix_configs = [{**CONFIGS[0], "min_subgroup_size": 16, "max_subgroup_size": 64}]
    assert sgmat.f16_configs(Dev()) == ([], 0)
    Dev.matrix_configs = [{**CONFIGS[0], "component_type": "i8", "result_type": "i32"}]
    assert sgmat.f16_configs(Dev()) == ([], 0)


@pytest.mark.skipif(importlib.util.find_spec("wgpudawn") is None, reason="needs the extra anygpu[dawn]")
def test_every_candidate_compiles_with_dawns_compiler():
    """Tint (Dawn's WGSL compiler) takes every family member in every checked layout."""
    done = subprocess.run([sys.executable, str(ROOT / "benchmarks" / "sgmat_sweep.py"), "--null"],
                          capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-3000:]
    compiled = json.loads(done.stdout.strip().splitlines()[-1])["compiled"]
    assert len(compiled) == len(sgmat.candidates(
        [{"M": 16, "N": 16, "K": 16}, {"M": 16, "N": 8, "K": 16}], 32, 1024, 49152)), done.stdout[-3000:]


def _drop_tuner_state(dev):
    """Forget what the tuner learnt about the sgmat family on `dev` (broken, verified members)."""
    state = tuner._state(dev)
    for table in (state.broken, state.verified):
        for k in [k for k in table if k[0] == sgmat_tune.TUNABLE.name]:
            del table[k]


@pytest.fixture
def fake_matrix_units(monkeypatch, tmp_path):
    """This device with matrix configs, an empty tuning cache, and a recording launch that
    computes the product with the device's ordinary f16 kernels (so values are still checked)."""
    dev = gpu()
    calls = []
    monkeypatch.setattr(dev, "matrix_configs", CONFIGS, raising=False)
    monkeypatch.setattr(dev, "limits", {**dev.limits, "max-compute-invocations-per-workgroup": 1024,
                                        "max-compute-workgroup-storage-size": 49152})
    monkeypatch.delattr(dev, "_sgmat_choice", raising=False)
    monkeypatch.setenv("ANYGPU_CACHE_DIR", str(tmp_path))
    _drop_tuner_state(dev)

    def launch(dev_, config, problem, a, b, out, bias=None):
        calls.append((config, problem, bias is not None))
        saved = dev_.__dict__.get("_sgmat_choice", False)
        dev_._sgmat_choice = None                 # compute it with the register-blocked family
        try:
            got = dev_.matmul_strided(a, b, problem.batch, problem.m, problem.n, problem.k, problem.trans_a,
                                      problem.trans_b, problem.a_batch, problem.b_batch, problem.alpha, bias=bias)
            dev_.copy(dev_.cast(got, out.dtype), out)
        finally:
            if saved is False:
                dev_.__dict__.pop("_sgmat_choice", None)
            else:
                dev_._sgmat_choice = saved

    monkeypatch.setattr(sgmat, "launch", launch)
    yield dev, calls
    dev.__dict__.pop("_sgmat_choice", None)
    dev.__dict__.pop("_sgmat_allowed", None)
    _drop_tuner_state(dev)


def _cache_pick(dev, problem, out, bias, name):
    """A tuning cache entry for the bucket of `problem` that names member `name`."""
    p = sgmat_tune.key(problem, out, bias)
    assert tuner.store(dev, sgmat_tune.TUNABLE, p, tuner.TuneResult(sgmat.SgConfig.parse(name), 1e-3))
    tuner.forget_choices(dev)


def test_f16_products_take_the_matrix_family_where_the_device_has_it(fake_matrix_units):
    dev, calls = fake_matrix_units
    rng = np.random.default_rng(3)
    a = rng.standard_normal((3, 37, 29)).astype(np.float16)
    b = rng.standard_normal((29, 41)).astype(np.float16)
    out = ag.tensor(a) @ ag.tensor(b)
    assert out.dtype == ag.float16
    np.testing.assert_allclose(out.numpy().astype(np.float64), a.astype(np.float64) @ b.astype(np.float64),
                               rtol=2e-2, atol=2e-2)
    assert calls and calls[0][0].name == sgmat.PREFERRED[0]
    assert (calls[0][1].m, calls[0][1].n, calls[0][1].k) in ((111, 41, 29), (37, 41, 29))
    calls.clear()
    x = ag.tensor(rng.standard_normal((5, 7)).astype(np.float32))
    _ = (x @ x.T).numpy()                         # f32 products keep the register-blocked family
    assert calls == []


@pytest.mark.parametrize("k, splits", [(4096, 8), (4100, 4), (700, 1)])
@pytest.mark.parametrize("out_dtype, with_bias", [("f16", True), ("f32", False)])
def test_a_long_weight_gradient_runs_in_k_slices(fake_matrix_units, k, splits, out_dtype, with_bias):
    """A^T @ B with few result tiles and a long k: slices of k as the batches of one launch
    (the split's strides), summed in f32 with the bias, against float64."""
    dev, calls = fake_matrix_units
    rng = np.random.default_rng(k)
    m, n = 37, 29
    p = Problem(1, m, n, k, True, False, alpha=0.75)
    assert sgmat.split_k(p, sgmat.choose(dev)) == splits
    a = rng.uniform(-1, 1, (k, m)).astype(np.float16)
    b = rng.uniform(-1, 1, (k, n)).astype(np.float16)
    bias = rng.uniform(-1, 1, n).astype(np.float16) if with_bias else None
    got = sgmat.matmul(dev, p, dev.upload(a.ravel()), dev.upload(b.ravel()), out_dtype,
                       None if bias is None else dev.upload(bias))
    assert got.dtype == out_dtype and got.len == m * n
    want = 0.75 * a.astype(np.float64).T @ b.astype(np.float64) + (0 if bias is None else bias.astype(np.float64))
    # the stand-in launch rounds each slice's sum to f16 (the register-blocked f16 kernels)
    assert np.abs(dev.read(got).astype(np.float64).reshape(m, n) - want).max() / np.abs(want).max() < 2e-3
    (config, run, biased), = calls
    assert (run.batch, run.k, run.a_batch, run.b_batch, run.alpha) == (splits, k // splits, True, True, 0.75)
    assert biased == (with_bias and splits == 1)


def test_split_k_leaves_other_products_whole():
    c = sgmat.SgConfig()
    assert sgmat.split_k(Problem(1, 4096, 4096, 4096, True, False), c) == 1       # tiles fill the GPU
    assert sgmat.split_k(Problem(1, 64, 64, 8192, False, False), c) == 1         # A not transposed
    assert sgmat.split_k(Problem(2, 64, 64, 8192, True, False), c) == 1          # batched
    assert sgmat.split_k(Problem(1, 64, 64, 8192, True, False), c) == 16


def test_a_matrix_kernel_that_fails_turns_the_family_off_once(fake_matrix_units, monkeypatch):
    dev, calls = fake_matrix_units

    def broken(*args, **kwargs):
        raise GpuError("sgmat: this driver rejects the kernel")

    monkeypatch.setattr(sgmat, "launch", broken)
    a = np.arange(12, dtype=np.float16).reshape(3, 4)
    with pytest.warns(RuntimeWarning, match="matrix-unit matmul disabled"):
        got = (ag.tensor(a) @ ag.tensor(a.T.copy())).numpy()
    np.testing.assert_allclose(got, a.astype(np.float64) @ a.T.astype(np.float64), rtol=1e-3)
    assert sgmat.choose(dev) is None


def test_a_configured_member_must_be_one_of_the_adapters(fake_matrix_units, monkeypatch):
    dev, _ = fake_matrix_units
    monkeypatch.setenv("ANYGPU_SGMAT_CONFIG", "sg16x16x16s64_w2x4_t4x2_k32")
    with pytest.raises(ValueError, match="ANYGPU_SGMAT_CONFIG"):
        sgmat.choose(dev)
    dev.__dict__.pop("_sgmat_choice", None)
    monkeypatch.setenv("ANYGPU_SGMAT_CONFIG", "sg16x8x16s32_w2x2_t2x2_k32")
    assert sgmat.choose(dev).name == "sg16x8x16s32_w2x2_t2x2_k32"
    dev.__dict__.pop("_sgmat_choice", None)
    monkeypatch.delenv("ANYGPU_SGMAT_CONFIG")
    monkeypatch.setenv("ANYGPU_MATRIX_UNITS", "0")
    assert sgmat.choose(dev) is None


def test_a_tuned_member_other_than_the_default_runs_the_product(fake_matrix_units):
    """A cached pick (ops/sgmat_tune.py) replaces the default member for its bucket only, after
    its float64 check; products of other buckets keep the default."""
    dev, calls = fake_matrix_units
    picked = "sg16x16x16s32_w2x4_t2x2_k32_v_e"
    assert picked != sgmat.PREFERRED[0]
    _cache_pick(dev, Problem(1, 37, 41, 29), "f16", False, picked)
    rng = np.random.default_rng(5)
    a = rng.standard_normal((37, 29)).astype(np.float16)
    b = rng.standard_normal((29, 41)).astype(np.float16)
    got = (ag.tensor(a) @ ag.tensor(b)).numpy()
    np.testing.assert_allclose(got.astype(np.float64), a.astype(np.float64) @ b.astype(np.float64),
                               rtol=2e-2, atol=2e-2)
    # its float64 check (of a product this small: the same size) and the product itself
    assert [(c.name, (p.m, p.n, p.k)) for c, p, _ in calls] == [(picked, (37, 41, 29))] * 2
    calls.clear()
    c = rng.standard_normal((29, 300)).astype(np.float16)             # n rounds to 256: another bucket
    _ = (ag.tensor(a) @ ag.tensor(c)).numpy()
    assert [x[0].name for x in calls] == [sgmat.PREFERRED[0]]


def test_a_cached_member_that_fails_its_float64_check_is_not_used(fake_matrix_units, monkeypatch):
    dev, calls = fake_matrix_units
    picked = "sg16x16x16s32_w4x2_t2x4_k64_v_e_s_c"
    _cache_pick(dev, Problem(1, 37, 41, 29), "f16", False, picked)
    right = sgmat.launch

    def wrong(dev_, config, problem, a, b, out, bias=None):
        right(dev_, config, problem, a, b, out, bias)
        if config.name == picked:   # this member computes garbage here
            dev_.copy(dev_.upload(np.full(out.len, 7.0, np.float16 if out.dtype == "f16" else np.float32)), out)

    monkeypatch.setattr(sgmat, "launch", wrong)
    a = np.random.default_rng(6).standard_normal((37, 29)).astype(np.float16)
    got = (ag.tensor(a) @ ag.tensor(np.ones((29, 41), np.float16))).numpy()
    np.testing.assert_allclose(got.astype(np.float64), a.astype(np.float64) @ np.ones((29, 41)), rtol=2e-2, atol=2e-2)
    assert [c.name for c, _, _ in calls] == [picked, sgmat.PREFERRED[0]]   # checked, refused


def test_a_tuned_member_that_fails_to_run_gives_way_to_the_default(fake_matrix_units, monkeypatch):
    """A GpuError of a tuned member drops that member (the tuner's `forget`), not the family."""
    dev, calls = fake_matrix_units
    picked = "sg16x16x16s32_w2x2_t2x2_k32_v_e"
    _cache_pick(dev, Problem(1, 37, 41, 29), "f16", False, picked)
    right = sgmat.launch
    seen = []

    def launch(dev_, config, problem, a, b, out, bias=None):
        if config.name == picked:
            seen.append(config.name)
            if len(seen) > 1:         # its float64 check ran; the product fails
                raise GpuError("sgmat: this driver rejects the kernel")
        right(dev_, config, problem, a, b, out, bias)

    monkeypatch.setattr(sgmat, "launch", launch)
    a = np.arange(37 * 29, dtype=np.float16).reshape(37, 29) / 512
    b = np.ones((29, 41), np.float16)
    import warnings
    with warnings.catch_warnings():
        warnings.simplefilter("error", RuntimeWarning)      # the family stays on: no warning
        got = (ag.tensor(a) @ ag.tensor(b)).numpy()
    np.testing.assert_allclose(got.astype(np.float64), a.astype(np.float64) @ b.astype(np.float64), rtol=2e-3)
    assert seen == [picked] * 2 and calls[-1][0].name == sgmat.PREFERRED[0]
    assert sgmat.choose(dev) is not None
    assert sgmat.choose(dev, Problem(1, 37, 41, 29)).name == sgmat.PREFERRED[0]


@pytest.mark.parametrize("kind", ["causal", "float_mask", "bool_mask"])
def test_float16_attention_on_matrix_units_matches_torch(fake_matrix_units, kind):
    """scaled_dot_product_attention on float16 q, k, v where the device has matrix units: the
    f32 composed kernels on converted operands, the result rounded to f16 once (on the H200 that
    was 4x faster than matrix flash and 20x faster than f16 products: nn/functional.py); values
    and the gradients of q, k, v against torch in float32."""
    torch = pytest.importorskip("torch")
    import anygpu.nn.functional as F
    dev, calls = fake_matrix_units
    rng = np.random.default_rng(7)
    q, k, v = (rng.standard_normal((2, 3, 13, 8)).astype(np.float16) for _ in range(3))
    g = rng.standard_normal((2, 3, 13, 8)).astype(np.float16)
    mask = {"causal": None, "float_mask": rng.standard_normal((13, 13)).astype(np.float32),
            "bool_mask": rng.random((13, 13)) < 0.7}[kind]
    if kind == "bool_mask":
        mask[:, 0] = True     # every row keeps a key
    tq, tk, tv = (torch.tensor(x.astype(np.float32), requires_grad=True) for x in (q, k, v))
    tmask = None if mask is None else torch.tensor(mask)
    want = torch.nn.functional.scaled_dot_product_attention(tq, tk, tv, attn_mask=tmask, is_causal=mask is None)
    want.backward(torch.tensor(g.astype(np.float32)))
    aq, ak, av = (ag.tensor(x, requires_grad=True) for x in (q, k, v))
    got = F.scaled_dot_product_attention(aq, ak, av, attn_mask=None if mask is None else ag.tensor(mask),
                                         is_causal=mask is None)
    assert got.dtype == ag.float16
    got.backward(ag.tensor(g))
    assert calls == []      # no f16 product: the f32 composed path
    np.testing.assert_allclose(got.numpy().astype(np.float32), want.detach().numpy(), rtol=2e-2, atol=2e-2)
    for a, t in ((aq, tq), (ak, tk), (av, tv)):
        assert a.grad.dtype == ag.float16
        np.testing.assert_allclose(a.grad.numpy().astype(np.float32), t.grad.numpy(), rtol=3e-2, atol=3e-2)


def test_out_dtype_f32_of_f16_operands_and_its_errors():
    dev = gpu()
    a = np.random.default_rng(1).standard_normal((5, 6)).astype(np.float16)
    got = dev.read(dev.matmul_strided(dev.upload(a.ravel()), dev.upload(a.T.copy().ravel()), 1, 5, 5, 6,
                                      out_dtype="f32"))
    assert got.dtype == np.float32
    np.testing.assert_allclose(got.reshape(5, 5), a.astype(np.float64) @ a.T.astype(np.float64), rtol=2e-3, atol=2e-3)
    x = dev.upload(np.ones(4, np.float32))
    with pytest.raises(ValueError, match="out_dtype"):
        dev.matmul_strided(x, x, 1, 2, 2, 2, out_dtype="f16")


# --- on an adapter with matrix units (Dawn on a GPU): the real kernels against float64 ---

needs_units = pytest.mark.skipif(not sgmat.f16_configs(gpu())[0],
                                 reason="no subgroup matrices on this adapter (Dawn on a GPU offers them)")

LAYOUTS = [  # (problem, bias)
    (Problem(1, 256, 256, 256), False),
    (Problem(1, 130, 70, 45), True),
    (Problem(2, 200, 136, 72, True, False), False),
    (Problem(3, 77, 65, 384, False, True, True, False, 0.5), True),
    (Problem(1, 65, 384, 77, True, True), False),
    (Problem(2, 512, 512, 256, True, False, True, False), False),
]


@needs_units
@pytest.mark.parametrize("name", [c.name for c in sgmat.candidates(CONFIGS, 32, 1024, 49152)][:6])
@pytest.mark.parametrize("case", range(len(LAYOUTS)))
def test_matrix_kernels_against_float64(name, case):
    dev = gpu()
    config = sgmat.SgConfig.parse(name)
    configs, sg = sgmat.f16_configs(dev)
    if config not in sgmat.candidates(configs, sg, int(dev.limits["max-compute-invocations-per-workgroup"]),
                                      int(dev.limits["max-compute-workgroup-storage-size"])):
        pytest.skip(f"{name} is not a member on this adapter")
    p, with_bias = LAYOUTS[case]
    a, b, bias, want = operands(p, with_bias, case)
    for out_dtype, tol in (("f32", 1e-5), ("f16", 2e-3)):
        out = dev.empty(p.batch * p.m * p.n, out_dtype)
        sgmat.launch(dev, config, p, dev.upload(a.ravel()), dev.upload(b.ravel()), out,
                     None if bias is None else dev.upload(bias))
        got = dev.read(out).astype(np.float64).reshape(p.batch, p.m, p.n)
        scale = np.abs(want).max()
        assert np.abs(got - np.broadcast_to(want, got.shape)).max() / scale < tol, (name, p, out_dtype)


@needs_units
@pytest.mark.parametrize("out_dtype, tol", [("f32", 1e-5), ("f16", 2e-3)])
def test_k_slices_on_the_matrix_units_against_float64(out_dtype, tol):
    dev = gpu()
    rng = np.random.default_rng(11)
    m, n, k = 200, 72, 8192
    p = Problem(1, m, n, k, True, False)
    assert sgmat.split_k(p, sgmat.choose(dev)) > 1
    a = rng.uniform(-1, 1, (k, m)).astype(np.float16)
    b = rng.uniform(-1, 1, (k, n)).astype(np.float16)
    bias = rng.uniform(-1, 1, n).astype(np.float16)
    got = sgmat.matmul(dev, p, dev.upload(a.ravel()), dev.upload(b.ravel()), out_dtype, dev.upload(bias))
    want = a.astype(np.float64).T @ b.astype(np.float64) + bias.astype(np.float64)
    assert np.abs(dev.read(got).astype(np.float64).reshape(m, n) - want).max() / np.abs(want).max() < tol


@needs_units
def test_nan_and_inf_propagate_through_the_matrix_units():
    dev = gpu()
    a = np.ones((32, 32), np.float16)
    a[3, 5] = np.nan
    a[7, 1] = np.inf
    got = (ag.tensor(a) @ ag.tensor(np.ones((32, 48), np.float16))).numpy()
    assert np.isnan(got[3]).all() and np.isinf(got[7]).all() and np.isfinite(np.delete(got, [3, 7], 0)).all()
    assert sgmat.choose(dev) is not None


@needs_units
@pytest.mark.parametrize("case", range(len(LAYOUTS)))
def test_every_shortlisted_member_passes_the_tuners_float64_check(case):
    """What the tuner may pick (ops/sgmat_tune.py), through its own run, small problem and
    float64 reference, in both result types."""
    dev = gpu()
    problem, bias = LAYOUTS[case]
    for out in ("f16", "f32"):
        p = sgmat_tune.key(problem, out, bias)
        members = sgmat_tune.TUNABLE.known(dev, p)
        assert members and members[0] == sgmat.choose(dev)
        failed = [c.name for c in members if not tuner.verify_small(dev, sgmat_tune.TUNABLE, c, p)]
        assert failed == [], (problem, out, bias)


@needs_units
def test_tuned_picks_other_than_the_default_compute_products(monkeypatch, tmp_path):
    """A bucket tuned on the device, then a cached pick other than the default member: the
    products run with them (seen through a spy on the launch) and match float64."""
    dev = gpu()
    monkeypatch.setenv("ANYGPU_CACHE_DIR", str(tmp_path))
    monkeypatch.setenv("ANYGPU_TUNE_BUDGET", "inf")
    used = []
    real = sgmat.launch

    def spy(dev_, config, problem, a, b, out, bias=None):
        used.append((config.name, problem.m))
        real(dev_, config, problem, a, b, out, bias)
    monkeypatch.setattr(sgmat, "launch", spy)
    rng = np.random.default_rng(11)
    default = sgmat.choose(dev)
    # x @ w.T + b as a linear layer runs it, with edge tiles: the tuner times the shortlist
    x = rng.uniform(-1, 1, (1040, 392)).astype(np.float16)
    w = rng.uniform(-1, 1, (384, 392)).astype(np.float16)
    bias = rng.uniform(-1, 1, 384).astype(np.float16)
    problem = Problem(1, 1040, 384, 392, False, True)
    tuned = sgmat.choose(dev, problem, "f16", True)
    entry = tuner.load_cache()[tuner.cache_key(dev, sgmat_tune.TUNABLE, sgmat_tune.key(problem, "f16", True))]
    assert entry["choice"] == tuned.name
    want = x.astype(np.float64) @ w.T.astype(np.float64) + bias
    other = next(c.name for c in sgmat_tune.TUNABLE.known(dev, sgmat_tune.key(problem)) if c not in (default, tuned))
    for pick in (tuned.name, other):     # the tuned pick (from the memo), then a cached one
        if pick != tuned.name:
            _cache_pick(dev, problem, "f16", True, pick)
        del used[:]
        got = dev.read(sgmat.matmul(dev, problem, dev.upload(x.ravel()), dev.upload(w.ravel()), "f16",
                                    dev.upload(bias))).astype(np.float64).reshape(1040, 384)
        assert used[-1] == (pick, 1040)
        assert np.abs(got - want).max() / np.abs(want).max() < 2e-3, pick
    assert sgmat.choose(dev) == default            # the device default is untouched
