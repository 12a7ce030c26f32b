"""Convolutions on matrix units (ops/conv_sgmat.py): conv2d, its input and weight
gradients and conv_transpose2d on f16 operands, and their route from nn.functional and
autocast, against torch CPU float32.

Three ways the kernels are checked, by what the adapter offers:
- everywhere with wgpudawn: Tint (Dawn's compiler) takes every generated kernel, on Dawn's
  Null backend (benchmarks/conv_sgmat.py --null, a subprocess);
- on Dawn without matrix units (lavapipe in CI): the *emulated* kernels -- the same WGSL
  with each subgroup-matrix operation written as scalar loops -- run every index of the
  real ones against torch (a subprocess under ANYGPU_RUNTIME=dawn where this process runs
  on wgpu-native, whose compiler does not take them in reasonable time);
- on an adapter with matrix units (Dawn on a GPU): the real kernels against torch.
"""

from __future__ import annotations

import importlib.util
import json
import os
import subprocess
import sys
import warnings
from pathlib import Path

import numpy as np
import pytest

import anygpu as ag
from anygpu.ops import conv_sgmat, gpu, sgmat
from anygpu.ops.sgmat import SgConfig

torch = pytest.importorskip("torch")

ROOT = Path(__file__).resolve().parents[2]
HAS_DAWN = importlib.util.find_spec("wgpudawn") is not None
CONFIGS = [{"M": 16, "N": 16, "K": 16, "component_type": "f16", "result_type": "f32",
            "min_subgroup_size": 32, "max_subgroup_size": 32, "checked": True}]

# (batch, in_c, in_h, in_w, out_c, kernel, stride, padding, dilation, groups, bias)
CASES = [
    (2, 3, 9, 7, 5, (3, 3), 1, 1, 1, 1, True),               # odd everything, edge tiles
    (3, 16, 8, 8, 32, (3, 3), 1, 1, 1, 1, True),             # digits' second layer: k = 144, 8-half loads
    (2, 6, 11, 10, 4, (3, 2), 2, (1, 0), (2, 1), 2, True),   # stride, dilation, groups, uneven padding
    (1, 8, 13, 9, 12, (1, 1), 1, 0, 1, 4, False),            # 1x1, 4 groups, no bias
    (4, 5, 16, 16, 40, (3, 3), 2, 1, 1, 1, False),           # stride 2 over 16x16: 4 phases, split weight grad
    (2, 4, 7, 6, 3, (1, 1), 3, 0, 1, 1, True),               # a kernel smaller than its stride: empty phases
    (5, 24, 12, 12, 20, (3, 3), 1, 2, 2, 1, True),           # dilation 2, long weight-gradient reduction
]


def _relative(got, want) -> float:
    return float(np.abs(np.asarray(got, np.float64) - want).max() / max(np.abs(want).max(), 1e-6))


def _torch_conv(case, rng):
    """f16 operands (as numpy) and torch CPU float32's output and gradients on them."""
    batch, in_c, in_h, in_w, out_c, (kh, kw), stride, padding, dilation, groups, bias = case
    x = rng.standard_normal((batch, in_c, in_h, in_w)).astype(np.float16)
    w = (rng.standard_normal((out_c, in_c // groups, kh, kw)) * 0.3).astype(np.float16)
    b = rng.standard_normal(out_c).astype(np.float16) if bias else None
    tx, tw = (torch.tensor(a.astype(np.float32), requires_grad=True) for a in (x, w))
    tb = torch.tensor(b.astype(np.float32), requires_grad=True) if bias else None
    out = torch.nn.functional.conv2d(tx, tw, tb, stride, padding, dilation, groups)
    g = rng.standard_normal(tuple(out.shape)).astype(np.float16)
    out.backward(torch.tensor(g.astype(np.float32)))
    return (x, w, b, g), (out.detach().numpy(), tx.grad.numpy(), tw.grad.numpy(),
                          None if tb is None else tb.grad.numpy())


def _check_device_ops(case, seed: int) -> None:
    """dev.conv2d, conv2d_grad_input, conv2d_grad_weight, conv2d_grad_bias on f16 Buffers
    against torch: f16 results within f16 rounding of the largest value."""
    dev = gpu()
    batch, in_c, in_h, in_w, out_c, (kh, kw), stride, padding, dilation, groups, bias = case
    (x, w, b, g), (want, want_gx, want_gw, want_gb) = _torch_conv(case, np.random.default_rng(seed))
    out_h, out_w = want.shape[2:]
    args = (stride, padding, dilation, groups)
    bx, bw, bg = dev.upload(x.ravel()), dev.upload(w.ravel()), dev.upload(g.ravel())
    out = dev.conv2d(bx, bw, None if b is None else dev.upload(b), batch, in_c, in_h, in_w, out_c, kh, kw, *args)
    gx = dev.conv2d_grad_input(bg, bw, batch, in_c, in_h, in_w, out_c, out_h, out_w, kh, kw, *args)
    gw = dev.conv2d_grad_weight(bx, bg, batch, in_c, in_h, in_w, out_c, out_h, out_w, kh, kw, *args)
    gb = dev.conv2d_grad_bias(bg, batch, out_c, out_h, out_w)
    for name, buf, ref in (("out", out, want), ("grad_input", gx, want_gx), ("grad_weight", gw, want_gw),
                           ("grad_bias", gb, want_gb)):
        if ref is None:
            continue
        assert buf.dtype == "f16", name
        got = dev.read(buf).reshape(ref.shape)
        assert _relative(got, ref) < 3e-3, (name, case, _relative(got, ref))


def _check_transpose(seed: int) -> None:
    """conv_transpose2d of f16 Buffers (bias, stride 2, output padding, groups) against torch."""
    dev = gpu()
    rng = np.random.default_rng(seed)
    x = rng.standard_normal((2, 6, 5, 4)).astype(np.float16)
    w = (rng.standard_normal((6, 2, 3, 3)) * 0.3).astype(np.float16)
    b = rng.standard_normal(4).astype(np.float16)
    want = torch.nn.functional.conv_transpose2d(*(torch.tensor(a.astype(np.float32)) for a in (x, w, b)),
                                                stride=2, padding=1, output_padding=1, groups=2).numpy()
    out = dev.conv_transpose2d(dev.upload(x.ravel()), dev.upload(w.ravel()), dev.upload(b), 2, 6, 5, 4, 4, 3, 3,
                               2, 1, 1, 1, 2)
    assert out.dtype == "f16"
    assert _relative(dev.read(out).reshape(want.shape), want) < 3e-3


def _check_nan_and_inf(seed: int) -> None:
    """A NaN and an inf in the input reach exactly the outputs whose windows cover them
    (and every output channel there); the rest stay finite."""
    dev = gpu()
    x = np.random.default_rng(seed).standard_normal((2, 3, 9, 9)).astype(np.float16)
    x[0, 1, 2, 3] = np.nan
    x[1, 0, 7, 7] = np.inf
    w = np.abs(np.random.default_rng(seed + 1).standard_normal((4, 3, 3, 3))).astype(np.float16) + 0.1
    got = dev.read(dev.conv2d(dev.upload(x.ravel()), dev.upload(w.ravel()), None, 2, 3, 9, 9, 4, 3, 3, 1, 1))
    got = got.reshape(2, 4, 9, 9)
    bad = np.zeros((2, 9, 9), bool)
    bad[0, 1:4, 2:5] = True
    bad[1, 6:9, 6:9] = True
    assert np.isnan(got[0][:, 1:4, 2:5]).all() and np.isinf(got[1][:, 6:9, 6:9]).all()
    assert np.isfinite(got.transpose(1, 0, 2, 3)[:, ~bad]).all()


# ------------------------------------------------------------------- everywhere

def test_config_sizes_and_candidates_respect_the_limits():
    every = conv_sgmat.candidates(CONFIGS, 32, 1024, 49152)
    small = conv_sgmat.candidates(CONFIGS, 32, 256, 32768)
    assert small and len(small) < len(every)
    assert all(c.threads <= 256 and conv_sgmat.workgroup_bytes(c) <= 32768 for c in small)
    assert conv_sgmat.candidates([], 32) == []
    # every shape in its forms (wide tiles, one stage); one stage needs about half the memory,
    # so some shapes fit only in it
    forms = {(c.wide, c.single) for c in every}
    assert forms == set(conv_sgmat.FORMS.values())
    two = SgConfig(16, 16, 16, 32, 2, 4, 2, 2, 64, wide=True)
    assert conv_sgmat.workgroup_bytes(two) > 49152 >= conv_sgmat.workgroup_bytes(two._replace(single=True))
    assert two not in every and two._replace(single=True) in every


def test_the_size_heuristic_fits_tiles_to_the_layer(monkeypatch):
    class Dev:
        matrix_configs = CONFIGS
        limits = {"max-compute-invocations-per-workgroup": 1024, "max-compute-workgroup-storage-size": 49152}
    dev = Dev()
    few_channels = conv_sgmat.choose(dev, 16, 32 * 64)          # digits' first layer: 16 channels
    assert few_channels.bm <= 32
    wide = conv_sgmat.choose(dev, 128, 32 * 32 * 32)            # many rows and columns: a large tile
    assert (wide.bm, wide.bn) == (128, 128)
    grads = conv_sgmat.choose(dev, 64, 9, 64)                   # a weight gradient of 9 columns, 64 splits
    assert grads.bn <= 32 and grads.bm == 64
    # equal tiles: the k step that pads the reduction least, then the longer
    assert conv_sgmat.choose(dev, 64, 32 * 32 * 32, 1, 3 * 9).tk == 32        # a stem's k = 27
    assert conv_sgmat.choose(dev, 64, 32 * 32 * 32, 1, 64 * 9).tk == 64
    # the default form: wide tiles, one stage; ANYGPU_CONV_SGMAT_FORM picks another of the same shape
    assert all(c.wide and c.single and not c.epi for c in (few_channels, wide, grads))
    monkeypatch.setenv("ANYGPU_CONV_SGMAT_FORM", "plain")
    plain = conv_sgmat.choose(dev, 128, 32 * 32 * 32)
    assert plain == wide._replace(wide=False, single=False)
    monkeypatch.setenv("ANYGPU_CONV_SGMAT_FORM", "s")
    assert conv_sgmat.choose(dev, 128, 32 * 32 * 32) == wide._replace(wide=False)
    # a form that does not fit the limits (two stages of wide 128 x 128 tiles: B's [n][k]
    # tile is larger) falls back to the shape's first form
    monkeypatch.setenv("ANYGPU_CONV_SGMAT_FORM", "v")
    assert conv_sgmat.workgroup_bytes(wide._replace(single=False)) > 49152
    assert conv_sgmat.choose(dev, 128, 32 * 32 * 32) == plain
    monkeypatch.setenv("ANYGPU_CONV_SGMAT_FORM", "fast")
    with pytest.raises(ValueError, match="ANYGPU_CONV_SGMAT_FORM"):
        conv_sgmat.choose(dev, 16, 16)
    monkeypatch.delenv("ANYGPU_CONV_SGMAT_FORM")
    monkeypatch.setenv("ANYGPU_CONV_SGMAT_CONFIG", "sg16x16x16s32_w2x2_t2x2_k32")
    assert conv_sgmat.choose(dev, 16, 16).name == "sg16x16x16s32_w2x2_t2x2_k32"
    monkeypatch.setenv("ANYGPU_CONV_SGMAT_CONFIG", "sg16x16x16s32_w9x9_t1x1_k32")
    with pytest.raises(ValueError, match="ANYGPU_CONV_SGMAT_CONFIG"):
        conv_sgmat.choose(dev, 16, 16)


def test_weight_gradient_splits_cover_the_reduction_in_whole_steps():
    config = SgConfig(16, 16, 16, 32, 2, 4, 2, 2, 32)
    for rows, cols, depth in ((64, 576, 32 * 1024), (16, 9, 2048), (128, 1152, 32 * 64), (8, 8, 31)):
        splits, per = conv_sgmat.grad_weight_splits(rows, cols, depth, 1, config)
        assert per % config.tk == 0 and (splits - 1) * per < depth <= splits * per


def test_f16_convolutions_without_matrix_units_run_on_the_f32_kernels(monkeypatch):
    """f16 Buffers reach the f32 kernels through conversions where the family is off."""
    monkeypatch.setenv("ANYGPU_CONV_MATRIX_UNITS", "0")
    _check_device_ops(CASES[2], 1)
    _check_transpose(2)


def test_mixed_dtypes_are_refused():
    dev = gpu()
    x = dev.upload(np.ones(2 * 3 * 5 * 5, np.float16))
    w = dev.upload(np.ones(4 * 3 * 3 * 3, np.float32))
    with pytest.raises(ValueError, match="conv2d: operands must be all f32 or all f16, got input f16, weight f32"):
        dev.conv2d(x, w, None, 2, 3, 5, 5, 4, 3, 3)


@pytest.mark.skipif(not HAS_DAWN, reason="needs the extra anygpu[dawn]")
def test_every_kernel_compiles_with_dawns_compiler():
    done = subprocess.run([sys.executable, str(ROOT / "benchmarks" / "conv_sgmat.py"), "--null"],
                          capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, (done.stdout[-3000:], done.stderr[-3000:])
    result = json.loads(done.stdout.strip().splitlines()[-1])
    assert result["failed"] == {}
    members = conv_sgmat.candidates([{"M": 16, "N": 16, "K": 16}, {"M": 16, "N": 8, "K": 16}], 32, 1024, 49152)
    assert {c.name for c in members} == set(result["members"])
    # 4 conv2d, 2 transposed, 4 weight-gradient layouts each; wide members with B packed and not
    assert len(result["compiled"]) == 10 * len(members) + 10 * sum(c.wide for c in members)


# ------------------------------------------------- emulated kernels (Dawn, no matrix units)

def _on_dawn() -> bool:
    from anygpu.runtime import webgpu
    return webgpu.current().name == "dawn"


# Small members for the emulated kernels: lavapipe compiles them in seconds (a 64-thread,
# 32 x 64 tile took 20 s), and they still have 2 x 2 subgroups, 2 result matrices per
# subgroup and one or two matrix steps per k step; each form (the default, wide tiles and one
# stage, first: the autocast test runs it), and ragged and whole rounds of the tile copies.
EMULATED = [SgConfig(16, 16, 16, 32, 2, 2, 1, 2, 16, wide=True, single=True),
            SgConfig(16, 16, 16, 32, 2, 2, 2, 1, 32),
            SgConfig(16, 16, 16, 32, 2, 2, 2, 1, 32, wide=True),
            SgConfig(16, 16, 16, 32, 2, 2, 1, 2, 16, single=True)]


@pytest.fixture
def emulated_units(monkeypatch, request):
    """This device running the emulated kernels of one small member (request.param)."""
    dev = gpu()
    if sgmat.f16_configs(dev)[0]:
        pytest.skip("this adapter has matrix units: the real kernels are checked below")
    monkeypatch.setattr(dev, "matrix_configs", CONFIGS, raising=False)
    monkeypatch.setattr(dev, "_sgmat_choice", None, raising=False)        # f16 products: the ordinary family
    monkeypatch.setattr(dev, "_conv_sgmat_emulate", True, raising=False)
    monkeypatch.setattr(dev, "_conv_sgmat_members", [request.param], raising=False)
    monkeypatch.setattr(dev, "_conv_sgmat_off", False, raising=False)
    monkeypatch.setattr(conv_sgmat, "available", lambda d: not getattr(d, "_conv_sgmat_off", False))
    with warnings.catch_warnings():
        warnings.simplefilter("error", RuntimeWarning)   # a kernel that fails must not fall back silently
        yield dev


needs_dawn = pytest.mark.skipif(not HAS_DAWN or not _on_dawn(),
                                reason="emulated kernels run on Dawn (test_emulated_kernels_on_dawn runs them)")


@needs_dawn
@pytest.mark.parametrize("emulated_units", EMULATED, indirect=True, ids=lambda c: c.name)
@pytest.mark.parametrize("case", range(len(CASES)))
def test_emulated_kernels_match_torch(emulated_units, case):
    _check_device_ops(CASES[case], case)


@needs_dawn
@pytest.mark.parametrize("emulated_units", [c for c in EMULATED if c.wide], indirect=True, ids=lambda c: c.name)
@pytest.mark.parametrize("case", (0, 2, 4, 6))
def test_emulated_kernels_with_only_a_wide_match_torch(emulated_units, case, monkeypatch):
    """Wide members with B's tile of single halves (ANYGPU_CONV_SGMAT_PACK_B=0)."""
    monkeypatch.setenv("ANYGPU_CONV_SGMAT_PACK_B", "0")
    _check_device_ops(CASES[case], case)


@needs_dawn
@pytest.mark.parametrize("emulated_units", EMULATED[:1], indirect=True, ids=lambda c: c.name)
def test_emulated_transposed_convolution_matches_torch(emulated_units):
    _check_transpose(5)


@needs_dawn
@pytest.mark.parametrize("emulated_units", EMULATED[:1], indirect=True, ids=lambda c: c.name)
def test_emulated_kernels_propagate_nan_and_inf(emulated_units):
    _check_nan_and_inf(3)


@needs_dawn
@pytest.mark.parametrize("emulated_units", EMULATED[:1], indirect=True, ids=lambda c: c.name)
def test_emulated_kernels_under_autocast(emulated_units, monkeypatch):
    """A small CNN under autocast: conv2d and conv_transpose2d take the f16 kernels (f16
    outputs), the f32 parameters get f32 gradients close to torch's float32 ones."""
    calls: list[str] = []
    for name in ("conv2d", "conv_transpose2d", "conv2d_grad_weight"):
        def counted(*args, _run=getattr(conv_sgmat, name), _name=name, **kwargs):
            calls.append(_name)
            return _run(*args, **kwargs)
        monkeypatch.setattr(conv_sgmat, name, counted)
    rng = np.random.default_rng(11)
    x = rng.standard_normal((3, 2, 10, 9)).astype(np.float32)
    # Tanh, not ReLU: a pre-activation within f16 rounding of 0 flips ReLU's mask between
    # autocast and float32, and one flipped pixel moved the first conv's weight gradient by up
    # to 18% of its largest value (17% of random initialisations failed the 2e-2 bound with
    # exact sums on f16-rounded forward values, in torch alone; with Tanh: at most 1e-3).
    torch.manual_seed(11)
    tnet = torch.nn.Sequential(torch.nn.Conv2d(2, 8, 3, padding=1), torch.nn.Tanh(),
                               torch.nn.Conv2d(8, 8, 3, stride=2, padding=1, groups=2), torch.nn.Tanh(),
                               torch.nn.ConvTranspose2d(8, 3, 3, stride=2, padding=1, output_padding=1))
    net = ag.nn.Sequential(ag.nn.Conv2d(2, 8, 3, padding=1), ag.nn.Tanh(),
                           ag.nn.Conv2d(8, 8, 3, stride=2, padding=1, groups=2), ag.nn.Tanh(),
                           ag.nn.ConvTranspose2d(8, 3, 3, stride=2, padding=1, output_padding=1))
    net.load_state_dict({k: ag.tensor(v.numpy()) for k, v in tnet.state_dict().items()})
    with ag.autocast("cuda", dtype=ag.float16):
        out = net(ag.tensor(x))
    assert out.dtype == ag.float16
    assert calls == ["conv2d", "conv2d", "conv_transpose2d"]
    out.float().sum().backward()
    # each conv2d's weight gradient and input gradient (a transposed convolution; the first
    # layer's input needs none), the transposed convolution's as two conv2d
    assert sorted(calls[3:]) == sorted(["conv2d_grad_weight"] * 3 + ["conv_transpose2d", "conv2d"]), calls
    want = tnet(torch.tensor(x))
    want.sum().backward()
    assert _relative(out.float().numpy(), want.detach().numpy()) < 1e-2
    for mine, theirs in zip(net.parameters(), tnet.parameters()):
        assert mine.grad.dtype == ag.float32
        assert _relative(mine.grad.numpy(), theirs.grad.numpy()) < 2e-2


@pytest.mark.skipif(not HAS_DAWN, reason="needs the extra anygpu[dawn]")
def test_emulated_kernels_on_dawn():
    """Where this process runs on wgpu-native, the emulated-kernel tests above run in a
    child on Dawn (same adapter)."""
    if _on_dawn():
        pytest.skip("this process runs on Dawn: the tests above ran here")
    if sgmat.f16_configs(gpu())[0]:
        pytest.skip("this adapter has matrix units")
    env = {**os.environ, "ANYGPU_RUNTIME": "dawn"}
    done = subprocess.run([sys.executable, "-m", "pytest", "-q", "-x", "-p", "no:cacheprovider", __file__,
                           "-k", "emulated and not on_dawn"], capture_output=True, text=True, timeout=900, env=env,
                          cwd=ROOT)
    assert done.returncode == 0, done.stdout[-4000:] + done.stderr[-2000:]
    assert " passed" in done.stdout and "skipped" not in done.stdout.splitlines()[-1], done.stdout[-2000:]


# ---------------------------------------------- the real kernels (Dawn on a GPU with matrix units)

needs_units = pytest.mark.skipif(not sgmat.f16_configs(gpu())[0],
                                 reason="no subgroup matrices on this adapter (Dawn on a GPU offers them)")


@needs_units
@pytest.mark.parametrize("case", range(len(CASES)))
def test_matrix_kernels_match_torch(case):
    dev = gpu()
    assert conv_sgmat.available(dev)
    with warnings.catch_warnings():
        warnings.simplefilter("error", RuntimeWarning)
        _check_device_ops(CASES[case], case)
    assert conv_sgmat.available(dev)


@needs_units
def test_matrix_transposed_convolution_matches_torch():
    with warnings.catch_warnings():
        warnings.simplefilter("error", RuntimeWarning)
        _check_transpose(5)


@needs_units
def test_matrix_kernels_propagate_nan_and_inf():
    with warnings.catch_warnings():
        warnings.simplefilter("error", RuntimeWarning)
        _check_nan_and_inf(3)


@needs_units
@pytest.mark.parametrize("name", [c.name for c in conv_sgmat.candidates(CONFIGS, 32, 1024, 49152)])
def test_every_member_matches_torch(name, monkeypatch):
    dev = gpu()
    if SgConfig.parse(name) not in conv_sgmat._members(dev):
        pytest.skip(f"{name} is not a member on this adapter")
    monkeypatch.setenv("ANYGPU_CONV_SGMAT_CONFIG", name)
    with warnings.catch_warnings():
        warnings.simplefilter("error", RuntimeWarning)
        for case in (0, 2, 4):
            _check_device_ops(CASES[case], case)
