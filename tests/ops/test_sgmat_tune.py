"""The subgroup-matrix family on the tuner (ops/sgmat_tune.py): buckets, the shortlist and its
order, the fallback, the ANYGPU_SGMAT_CONFIG / ANYGPU_MATRIX_UNITS switches, the shipped
defaults, small problems of the float64 check, a whole tuning run (with the kernels computed
on the host: lavapipe has no matrix units), and Tint compiling every shortlisted member
(Dawn's Null backend). Values of the real kernels: tests/ops/test_sgmat.py on a GPU."""

from __future__ import annotations

import importlib.util
import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from anygpu.ops import gpu, matmul_tune, sgmat, sgmat_tune, tuner
from anygpu.ops.matmul_problem import Problem

ROOT = Path(__file__).resolve().parents[2]


def _config(m, n, k):
    return {"M": m, "N": n, "K": k, "component_type": "f16", "result_type": "f32",
            "min_subgroup_size": 32, "max_subgroup_size": 32, "checked": True}


# What Dawn offers on the H200 (docs/NOTES.md, "Matrix units through Dawn"): f16 -> f32 configs.
H200 = [_config(16, 16, 16), _config(16, 8, 16), _config(16, 8, 8)]
BIG = {"max-compute-invocations-per-workgroup": 1024, "max-compute-workgroup-storage-size": 49152}

# nanoGPT's products (6x384, batch 64 x block 256) as benchmarks/sgmat_sweep.py times them.
QKV = (Problem(1, 16384, 1152, 384, False, True), "f16", True)
FC = (Problem(1, 16384, 1536, 384, False, True), "f16", False)
PROJ = (Problem(1, 16384, 384, 1536, False, True), "f16", False)
DW = (Problem(1, 1536, 384, 16384, True, False), "f16", False)
DX = (Problem(1, 16384, 384, 1536), "f16", False)
CUBE = (Problem(1, 4096, 4096, 4096), "f32", False)


class FakeDev:
    """A device's attributes as the family and the tuner read them (no GPU behind it)."""

    adapter_name = "NVIDIA H200"
    driver = "NVIDIA 580.159.04"
    adapter_type = "DiscreteGPU"

    def __init__(self, configs=H200, limits=BIG):
        self.matrix_configs = configs
        self.limits = dict(limits)


def _bucket(problem, out="f16", bias=False):
    return sgmat_tune.TUNABLE.bucket(sgmat_tune.key(problem, out, bias))


def test_buckets_round_as_matmuls_and_keep_what_changes_the_code():
    assert _bucket(*QKV) == "f16-f16out-m16384-n1024-k512-NT-vec8-single-bias"
    assert _bucket(*DW) == "f16-f16out-m2048-n512-k16384-TN-vec8-single"
    assert _bucket(*CUBE) == "f16-f32out-m4096-n4096-k4096-NN-vec8-single"
    # the sizes round as the register-blocked family's f16 buckets do
    for p, _, _ in (QKV, FC, PROJ, DW, DX, CUBE):
        mm = matmul_tune.TUNABLES["f16"].bucket(matmul_tune.key(p, "f16")).split("-")
        assert _bucket(p).split("-")[2:6] == mm[1:5]
    # the six nanoGPT / sweep products fall in six buckets
    assert len({_bucket(*x) for x in (QKV, FC, PROJ, DW, DX, CUBE)}) == 6
    p = Problem(1, 304, 200, 96)
    variants = {_bucket(p), _bucket(p, "f32"), _bucket(p, bias=True), _bucket(p._replace(batch=3)),
                _bucket(p._replace(alpha=0.125)), _bucket(p._replace(trans_a=True)), _bucket(p._replace(n=201)),
                _bucket(p._replace(k=99)), _bucket(p._replace(k=99, n=201))}
    assert len(variants) == 9
    assert _bucket(p._replace(n=201)).endswith("vec8a-single") and _bucket(p._replace(k=99)).endswith("vec8b-single")
    assert _bucket(p) == _bucket(p._replace(m=312, n=208, k=104))     # same powers of two, same loads
    with pytest.raises(ValueError, match="sgmat"):
        sgmat_tune.key(p, "f64")


def test_the_shortlist_starts_with_the_default_and_holds_the_sweeps_winners():
    dev = FakeDev()
    allowed = sgmat.allowed(dev)
    assert len(allowed) == 243
    known = sgmat_tune.TUNABLE.known(dev, sgmat_tune.key(*DX))
    names = [c.name for c in known]
    assert names[0] == sgmat.PREFERRED[0] == sgmat.choose(dev).name
    assert names == list(sgmat_tune.SHORTLIST) and 8 <= len(names) <= 12 and len(set(names)) == len(names)
    assert all(c in allowed for c in known)
    # every member the H200's tuned nanoGPT step picked (tuned_defaults.json, session 20)
    winners = {"sg16x16x16s32_w2x4_t4x2_k64_v_e_s_c", "sg16x16x16s32_w2x2_t4x4_k32_v_e_s_c_p",
               "sg16x16x16s32_w2x4_t4x2_k64_v_e_s_c_p", "sg16x16x16s32_w4x2_t2x4_k64_v_e_s_c_p",
               "sg16x16x16s32_w4x4_t4x2_k32_v_e_s_c_p", "sg16x16x16s32_w2x2_t4x4_k32_v_e_s_c",
               "sg16x16x16s32_w2x4_t4x2_k64_v_e_s", "sg16x16x16s32_w2x4_t2x2_k32_v_e"}
    shipped = {e["choice"] for k, e in tuner.load_defaults().items() if k.startswith("sgmat v4 | nvidia-gpu")}
    assert shipped == winners and winners <= set(names)
    # a small product: tiles far larger than it are left out, the default stays first
    small = sgmat_tune.TUNABLE.candidates(dev, sgmat_tune.key(Problem(1, 40, 48, 512)))
    assert small[0] == known[0] and small[1:] and all(c.bm <= 80 and c.bn <= 96 for c in small[1:])
    assert [c for c in known if c in small] == small


def test_the_fallback_is_the_first_preferred_member_the_adapter_allows():
    # 16x8 configs only: no 16x16x16 member, so none of PREFERRED; the first allowed is the default
    dev = FakeDev([_config(16, 8, 16)])
    allowed = sgmat.allowed(dev)
    known = sgmat_tune.TUNABLE.known(dev, sgmat_tune.key(*DX))
    assert known[0] == allowed[0] == sgmat.choose(dev)
    # no shortlisted member fits: the shortlist is the family's first members
    assert [c.name for c in known] == [c.name for c in allowed][:sgmat_tune.FILL_TO]
    # smaller limits: the first of PREFERRED that fits
    dev = FakeDev(limits={"max-compute-invocations-per-workgroup": 256, "max-compute-workgroup-storage-size": 36000})
    allowed = sgmat.allowed(dev)
    first = next(n for n in sgmat.PREFERRED if sgmat.SgConfig.parse(n) in allowed)
    assert first != sgmat.PREFERRED[0]
    assert sgmat_tune.TUNABLE.known(dev, sgmat_tune.key(*DX))[0].name == first == sgmat.choose(dev).name
    assert all(c.threads <= 256 and c.workgroup_bytes() <= 40000
               for c in sgmat_tune.TUNABLE.known(dev, sgmat_tune.key(*DX)))
    # a shortlist with too few members on this adapter is filled from its own family
    dev = FakeDev([_config(8, 8, 8)])
    known = sgmat_tune.TUNABLE.known(dev, sgmat_tune.key(*DX))
    assert [c.name for c in known] == [c.name for c in sgmat.allowed(dev)][:sgmat_tune.FILL_TO]
    assert sgmat_tune.TUNABLE.known(FakeDev([]), sgmat_tune.key(*DX)) == []


def test_untuned_the_default_runs_and_the_switches_still_hold(monkeypatch, tmp_path):
    monkeypatch.setenv("ANYGPU_CACHE_DIR", str(tmp_path))
    monkeypatch.setenv("ANYGPU_TUNE_DEFAULTS", "0")
    monkeypatch.setenv("ANYGPU_TUNE_BUDGET", "0")
    dev = FakeDev()
    for problem, out, bias in (QKV, FC, PROJ, DW, DX, CUBE):
        assert sgmat.choose(dev, problem, out, bias).name == sgmat.PREFERRED[0]
    asked = []
    monkeypatch.setattr(sgmat_tune, "choose", lambda *args: asked.append(args))
    monkeypatch.setenv("ANYGPU_SGMAT_CONFIG", "sg16x8x8s32_w4x4_t2x2_k32")
    dev = FakeDev()
    assert sgmat.choose(dev, *QKV).name == "sg16x8x8s32_w4x4_t2x2_k32" and asked == []   # no tuner
    monkeypatch.setenv("ANYGPU_SGMAT_CONFIG", "sg16x16x16s64_w2x4_t4x2_k32")
    with pytest.raises(ValueError, match="ANYGPU_SGMAT_CONFIG"):
        sgmat.choose(FakeDev(), *QKV)
    monkeypatch.delenv("ANYGPU_SGMAT_CONFIG")
    monkeypatch.setenv("ANYGPU_MATRIX_UNITS", "0")
    assert sgmat.choose(FakeDev(), *QKV) is None and asked == []
    monkeypatch.delenv("ANYGPU_MATRIX_UNITS")
    assert sgmat.choose(FakeDev([]), *QKV) is None and asked == []
    dev = FakeDev()
    dev._sgmat_choice = None            # the family failed here (sgmat.forget)
    assert sgmat.choose(dev, *QKV) is None and asked == []


def test_the_shipped_defaults_hold_the_sweeps_winners_for_nvidia(monkeypatch, tmp_path):
    monkeypatch.setenv("ANYGPU_CACHE_DIR", str(tmp_path))
    monkeypatch.setenv("ANYGPU_TUNE_BUDGET", "0")    # no timing: the shipped default (or the fallback)
    monkeypatch.setattr(tuner, "_DEFAULTS", [])      # read the file itself
    checked = []

    refused = "sg16x16x16s32_w2x2_t4x4_k32_v_e_s_c_p"

    def verify_small(dev, tunable, candidate, problem):
        checked.append(candidate.name)
        return candidate.name != refused      # this one fails its check here
    monkeypatch.setattr(tuner, "verify_small", verify_small)
    # Tuning the nanoGPT autocast step on the H200 (session 20) filed these buckets: the products
    # with their biases, the input gradient, and the weight gradient's k slices (f32, batched).
    # The shipped choice is a shortlisted member and is used, unless its float64 check fails
    # (`refused`, here), which gives the fallback.
    dev = FakeDev()
    entries = tuner.load_defaults()
    fc, proj = (FC[0], "f16", True), (PROJ[0], "f16", True)
    slices = (Problem(8, 1536, 384, 2048, True, False), "f32", False)
    choices = set()
    for case in (QKV, fc, proj, DX, slices):
        entry = entries[tuner.defaults_key(dev, sgmat_tune.TUNABLE, sgmat_tune.key(*case))]
        assert entry["from"] == "NVIDIA H200", entry
        assert entry["choice"] in sgmat_tune.SHORTLIST
        choices.add(entry["choice"])
        want = sgmat.PREFERRED[0] if entry["choice"] == refused else entry["choice"]
        assert sgmat.choose(dev, *case).name == want, case
    assert refused in choices and len(choices) > 1
    # a shipped pick from another adapter's sweep is checked against float64 before it is used
    assert all(name in sgmat_tune.SHORTLIST for name in checked)
    # another vendor, or the defaults turned off: the fallback
    other = FakeDev()
    other.adapter_name, other.driver = "AMD Radeon", "radv"
    assert sgmat.choose(other, *QKV).name == sgmat.PREFERRED[0]
    monkeypatch.setenv("ANYGPU_TUNE_DEFAULTS", "0")
    assert sgmat.choose(FakeDev(), *QKV).name == sgmat.PREFERRED[0]
    # a bucket without a default: the fallback
    monkeypatch.delenv("ANYGPU_TUNE_DEFAULTS")
    odd = (Problem(3, 48, 40, 24, True, True), "f32", True)
    assert tuner.defaults_key(FakeDev(), sgmat_tune.TUNABLE, sgmat_tune.key(*odd)) not in entries
    assert sgmat.choose(FakeDev(), *odd).name == sgmat.PREFERRED[0]


@pytest.mark.parametrize("problem", [
    Problem(1, 16384, 1152, 384, False, True), Problem(3, 1537, 385, 16389, True, False, True, False, 0.5),
    Problem(2, 100, 70, 45, True, True), Problem(1, 4096, 4100, 4096)])
def test_the_float64_checks_small_product_generates_the_same_code(problem):
    dev = FakeDev()
    for out, bias in (("f16", True), ("f32", False)):
        p = sgmat_tune.key(problem, out, bias)
        for config in sgmat_tune.TUNABLE.known(dev, p):
            small = sgmat_tune.product(sgmat_tune.TUNABLE.small_for(config, p))
            assert sgmat.layout(config, small, out, bias) == sgmat.layout(config, problem, out, bias)
            assert small.m <= 2 * config.bm and small.n <= 2 * config.bn and small.k <= 3 * config.tk
            assert small.batch == min(problem.batch, 2) and small[4:] == problem[4:]
            assert -(-small.k // config.tk) >= min(2, -(-problem.k // config.tk))


def test_the_reference_adds_the_bias_and_scales():
    rng = np.random.default_rng(0)
    p = sgmat_tune.key(Problem(2, 5, 3, 4, True, False, True, False, 0.5), "f32", True)
    a, b, bias = sgmat_tune.TUNABLE.inputs(p, rng)
    assert a.dtype == b.dtype == bias.dtype == np.float16 and (a.size, b.size, bias.size) == (40, 12, 3)
    want = 0.5 * np.einsum("zkm,kn->zmn", a.reshape(2, 4, 5).astype(np.float64), b.reshape(4, 3)) + bias
    np.testing.assert_allclose(sgmat_tune.TUNABLE.reference(p, [a, b, bias]).reshape(2, 5, 3), want, rtol=1e-12)


@pytest.fixture
def host_matrix_units(monkeypatch, tmp_path):
    """This device posing as an NVIDIA GPU with the H200's matrix configs, an empty tuning
    cache, and sgmat.launch computing on the host (the kernels' values are checked on a GPU)."""
    dev = gpu()
    monkeypatch.setattr(dev, "matrix_configs", H200, raising=False)
    monkeypatch.setattr(dev, "limits", {**dev.limits, **BIG})
    monkeypatch.setattr(dev, "adapter_type", "DiscreteGPU")
    monkeypatch.setattr(dev, "adapter_name", "NVIDIA H200 (posing)")
    monkeypatch.delattr(dev, "_sgmat_choice", raising=False)
    monkeypatch.setenv("ANYGPU_CACHE_DIR", str(tmp_path))
    launched = []

    def launch(dev_, config, problem, a, b, out, bias=None):
        launched.append(config.name)
        p = problem
        A = dev_.read(a).astype(np.float64).reshape(-1, *((p.k, p.m) if p.trans_a else (p.m, p.k)))
        B = dev_.read(b).astype(np.float64).reshape(-1, *((p.n, p.k) if p.trans_b else (p.k, p.n)))
        C = p.alpha * ((A.transpose(0, 2, 1) if p.trans_a else A) @ (B.transpose(0, 2, 1) if p.trans_b else B))
        if bias is not None:
            C = C + dev_.read(bias).astype(np.float64)
        C = np.broadcast_to(C, (p.batch, p.m, p.n)).astype(np.float16 if out.dtype == "f16" else np.float32)
        dev_.copy(dev_.upload(C.ravel()), out)

    monkeypatch.setattr(sgmat, "launch", launch)
    yield dev, launched
    for name in ("_sgmat_choice", "_sgmat_allowed"):
        dev.__dict__.pop(name, None)
    state = tuner._state(dev)
    for table in (state.broken, state.verified):
        for k in [k for k in table if k[0] == "sgmat"]:
            del table[k]


def test_a_bucket_is_tuned_over_the_shortlist_and_its_winner_cached(host_matrix_units, monkeypatch):
    dev, launched = host_matrix_units
    monkeypatch.setenv("ANYGPU_TUNE_BUDGET", "inf")
    problem = Problem(1, 520, 272, 40, False, True)        # 11 Mflop: over the GPU threshold
    p = sgmat_tune.key(problem, "f16", True)
    assert sgmat_tune.TUNABLE.work(p) >= sgmat_tune.TUNABLE.tune_from["gpu"]
    timed = []
    real = tuner.time_candidate

    def time_candidate(dev_, run, best, budget_s, rounds):
        timed.append(launched[-1] if launched else None)
        real(dev_, run, best, budget_s, rounds)
        return 1.0 if launched[-1] != "sg16x16x16s32_w4x2_t2x4_k64_v_e_s_c" else 0.5   # this one is fastest
    monkeypatch.setattr(tuner, "time_candidate", time_candidate)
    chosen = sgmat.choose(dev, problem, "f16", True)
    assert chosen.name == "sg16x16x16s32_w4x2_t2x4_k64_v_e_s_c"
    members = [c.name for c in sgmat_tune.TUNABLE.candidates(dev, p)]
    assert timed == members and members[0] == sgmat.PREFERRED[0]      # the fallback first, each once
    entry = tuner.load_cache()[tuner.cache_key(dev, sgmat_tune.TUNABLE, p)]
    assert entry["choice"] == chosen.name
    # the next call of the bucket reads the choice (memo), and the product runs with it
    del launched[:]
    out = sgmat.matmul(dev, problem._replace(m=515), dev.upload(np.ones(515 * 40, np.float16)),
                       dev.upload(np.ones(272 * 40, np.float16)), "f16", dev.upload(np.ones(272, np.float16)))
    assert launched[-1] == chosen.name
    np.testing.assert_array_equal(dev.read(out), np.full(515 * 272, 41.0, np.float16))


@pytest.mark.skipif(importlib.util.find_spec("wgpudawn") is None, reason="needs the extra anygpu[dawn]")
def test_every_shortlisted_member_compiles_with_dawns_compiler():
    """Tint (Dawn's Null backend) takes every member the tuner may pick on the H200, in every
    layout of benchmarks/sgmat_sweep.py's checks."""
    names = [c.name for c in sgmat_tune.shortlist(sgmat.allowed(FakeDev()))]
    done = subprocess.run([sys.executable, str(ROOT / "benchmarks" / "sgmat_sweep.py"), "--null",
                           "--only", ",".join(names)], capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-3000:]
    assert json.loads(done.stdout.strip().splitlines()[-1])["compiled"] == names, done.stdout[-3000:]
