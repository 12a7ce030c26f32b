"""Flash attention's kernels on matrix units (ops/flash_sgmat.py) through the text transform
ops/sgmat_emulate.emulate, which writes each subgroup-matrix load, multiply-accumulate and
store, each shuffle and each reduction as scalar code: the kernels' indices, bounds, masks,
dropout and online softmax run on an adapter without matrix units or subgroups (lavapipe in
CI) against float64, through flash_attention(kind="matrix") and its backward with only the
kernels' text rewritten (the fixture `emulated`).

The emulated kernels run on Dawn: in a child under ANYGPU_RUNTIME=dawn where this process runs
on wgpu-native (test_emulated_kernels_on_dawn), as tests/ops/test_sgmat_emulated.py does; the
child's llvmpipe uses 128-bit vectors, which compile these kernels in about half the time
(their many per-lane loads). The transform's refusals and its output text are checked without
a device.
"""

from __future__ import annotations

import re

import numpy as np
import pytest

import dawn_child  # (tests/ops/dawn_child.py)
from anygpu.ops import flash_attention, flash_sgmat, gpu
from anygpu.ops.sgmat_emulate import emulate

EMPTY = np.float32(3.0e38)     # the lse of a row with every key masked (flash_sgmat.HASH_WGSL)

# (d, dv, length, source, causal, masked, dropout_p). Odd lengths: partial tiles of queries and
# keys (tiles of 16 * ns rows), several key tiles a workgroup, batches of 2 (z > 0); d != dv
# (the two tile pitches); a float mask with one row masked out entirely; dropout.
CASES = [
    (16, 16, 37, 37, True, False, 0.0),
    (32, 64, 37, 50, False, True, 0.0),
    (64, 64, 37, 50, True, True, 0.0),
    (32, 32, 37, 50, False, False, 0.25),
]


def _pcg(v: np.ndarray) -> np.ndarray:
    state = v * np.uint32(747796405) + np.uint32(2891336453)
    word = ((state >> ((state >> np.uint32(28)) + np.uint32(4))) ^ state) * np.uint32(277803737)
    return (word >> np.uint32(22)) ^ word


def _reference(q, k, v, mask, grad_out, scale, causal, keep):
    """float64 attention forward and backward: out, lse (EMPTY where every key is masked),
    dq, dk, dv. keep: dropout's scale of each score (or 1)."""
    s = scale * q @ k.transpose(0, 2, 1) + mask
    if causal:
        length, source = s.shape[1:]
        s = np.where(np.arange(source)[None, :] <= np.arange(length)[:, None], s, -np.inf)
    top = s.max(-1, keepdims=True)
    empty = ~np.isfinite(top)
    p = np.exp(s - np.where(empty, 0.0, top))
    total = p.sum(-1, keepdims=True)
    lse = np.where(empty, EMPTY, top + np.log(np.where(empty, 1.0, total)))[..., 0]
    probs = np.where(empty, 0.0, p / np.where(empty, 1.0, total))
    out = (probs * keep) @ v
    dvec = (grad_out * out).sum(-1)
    ds = probs * ((grad_out @ v.transpose(0, 2, 1)) * keep - dvec[..., None])
    dq = scale * ds @ k
    dk = scale * ds.transpose(0, 2, 1) @ q
    dv = (probs * keep).transpose(0, 2, 1) @ grad_out
    return out, lse, dq, dk, dv


@pytest.fixture
def emulated(monkeypatch):
    """The device, with flash_sgmat's kernels as emulate() rewrites them and the subgroup
    counts its workgroup memory allows less emulate()'s exchange array (a u32 a thread)."""
    dev = gpu()
    storage = int(dev.limits.get("max-compute-workgroup-storage-size", 16384))
    threads = int(dev.limits.get("max-compute-invocations-per-workgroup", 256))
    real = flash_sgmat.generate
    monkeypatch.setattr(flash_sgmat, "generate", lambda kind, shape: emulate(real(kind, shape)))
    monkeypatch.setattr(flash_sgmat, "config", lambda _: (storage - 4 * 32 * 4, threads))
    return dev


def _worst(got: np.ndarray, want: np.ndarray) -> tuple[float, tuple]:
    """The largest error relative to want's largest magnitude (NaN: inf), and where."""
    err = np.abs(got - want)
    err = np.where(np.isnan(err), np.inf, err)
    at = np.unravel_index(np.argmax(err), err.shape)
    return float(err[at] / np.abs(want).max()), tuple(int(x) for x in at)


@pytest.mark.skipif(dawn_child.reason() is not None, reason=dawn_child.reason() or "")
@pytest.mark.parametrize("case", CASES, ids=[f"d{c[0]}-dv{c[1]}-l{c[2]}-s{c[3]}" + "-causal" * c[4] + "-mask" * c[5]
                                             + "-dropout" * (c[6] > 0) for c in CASES])
def test_emulated_flash_kernels_match_float64(case, emulated):
    """flash_attention and its backward with kind="matrix" (flash_sgmat.forward, .backward)."""
    d, dv, length, source, causal, masked, dropout_p = case
    dev = emulated
    batch, seed = 2, 0x1234_5678_9ABC
    rng = np.random.default_rng(d * 1000 + source)
    q, k, v = (rng.standard_normal(shape).astype(np.float16)
               for shape in ((batch, length, d), (batch, source, d), (batch, source, dv)))
    grad_out = rng.standard_normal((batch, length, dv)).astype(np.float16)
    mask = np.zeros((batch, length, source), np.float32)
    if masked:
        mask = rng.standard_normal(mask.shape).astype(np.float32)
        mask[1, 5] = -np.inf                   # a row with no key: out 0, lse EMPTY, zero gradients
    keep = np.ones(mask.shape)
    if dropout_p:                              # flash_sgmat.HASH_WGSL's kept(z, i, j)
        e = np.arange(batch * length * source, dtype=np.uint32).reshape(mask.shape)
        draw = _pcg(_pcg(e ^ np.uint32(seed & 0xFFFFFFFF)) + np.uint32(seed >> 32))
        keep = np.where(draw >= np.uint32(int(dropout_p * 2 ** 32)), 1.0 / (1.0 - dropout_p), 0.0)
    scale = d ** -0.5
    f64 = [x.astype(np.float64) for x in (q, k, v, grad_out)]
    want = _reference(f64[0], f64[1], f64[2], mask.astype(np.float64), f64[3], scale, causal, keep)

    qb, kb, vb, gb = (dev.upload(x.ravel()) for x in (q, k, v, grad_out))
    args = dict(scale=scale, causal=causal, mask=dev.upload(mask.ravel()) if masked else None, dropout_p=dropout_p,
                seed=seed if dropout_p else None, kind="matrix")
    out, lse = flash_attention.flash_attention(dev, qb, kb, vb, batch, length, source, d, dv, **args)
    grads = flash_attention.flash_attention_backward(dev, gb, qb, kb, vb, out, lse, batch, length, source, d, dv,
                                                     **args)
    got_lse, want_lse = dev.read(lse).reshape(want[1].shape), want[1]
    assert np.array_equal(got_lse == EMPTY, want_lse == EMPTY), "lse: rows with no key"
    live = want_lse != EMPTY
    err = np.where(live, np.abs(got_lse - want_lse), 0.0)
    assert err.max() < 1e-4 * max(1.0, np.abs(want_lse[live]).max()), \
        f"lse: error {err.max():.3g} at (z, row) {np.unravel_index(np.argmax(err), err.shape)}"
    for name, buf, ref in zip(("out", "dq", "dk", "dv"), (out, *grads), (want[0], *want[2:])):
        rel, at = _worst(dev.read(buf).astype(np.float64).reshape(ref.shape), ref)
        assert rel < 2e-3, f"{name}: relative error {rel:.3g}, worst at (z, row, col) {at}"


def _torch_heads(x64, layout, b, t, h, d, causal):
    """float64 torch: the attention of heads taken from x64 as `layout` says, y in [B, T, H*D]."""
    import torch
    x = torch.tensor(x64, requires_grad=True)
    q, k, v = _heads(torch, x, layout, b, t, h, d)
    y = torch.nn.functional.scaled_dot_product_attention(q, k, v, is_causal=causal)
    return x, y.transpose(1, 2).reshape(b, t, h * d)


def _heads(lib, x, layout, b, t, h, d):
    """q, k, v [B, H, T, D] from x: "split" nanoGPT's (x [B, T, 3C] split in three), "spare" the
    same from a [B, T, 4C] tensor whose last quarter is not read, "same" x [B, T, C] as all three."""
    if layout == "same":
        q = x.view(b, t, h, d).transpose(1, 2)
        return q, q, q
    q, k, v = x.split(h * d, dim=2)[:3]
    return tuple(y.view(b, t, h, d).transpose(1, 2) for y in (q, k, v))


@pytest.mark.skipif(dawn_child.reason() is not None, reason=dawn_child.reason() or "")
@pytest.mark.parametrize("layout", ["split", "spare", "same"])
def test_emulated_heads_of_one_tensor(layout, emulated, monkeypatch):
    """nanoGPT's attention on the matrix kernels: q, k, v views of one tensor read in place, the
    output written in [B, T, H, D] order (so transpose(1, 2).contiguous() is no copy) and, where
    the views are disjoint ("split", "spare"), their gradients written into one buffer of the
    tensor's shape (the unread quarter zero); "same" (sdpa(x, x, x)) sums three gradients. The
    output and x's gradient against float64 torch, and which kernels ran."""
    import anygpu as ag
    dev = emulated
    b, t, h, d = 2, 37, 3, 16
    width = {"split": 3, "spare": 4, "same": 1}[layout] * h * d
    rng = np.random.default_rng(11)
    x16 = rng.standard_normal((b, t, width)).astype(np.float16)
    g16 = rng.standard_normal((b, t, h * d)).astype(np.float16)
    names = []
    real = dev.launch   # (on the instance: a test that patched it there before leaves a bound method behind)
    monkeypatch.setattr(dev, "launch", lambda kernel, *a, **k: names.append(kernel.name) or real(kernel, *a, **k))
    x = ag.tensor(x16).requires_grad_()
    q, k, v = _heads(ag, x, layout, b, t, h, d)
    out = ag.nn.functional.scaled_dot_product_attention(q, k, v, is_causal=True)
    y = out.transpose(1, 2).contiguous().view(b, t, h * d)
    forward = list(names)
    (y.float() * ag.tensor(g16).float()).sum().backward()
    backward = names[len(forward):]
    want_x, want_y = _torch_heads(x16.astype(np.float64), layout, b, t, h, d, True)
    (want_y * __import__("torch").tensor(g16.astype(np.float64))).sum().backward()
    rel, at = _worst(y.float().numpy().astype(np.float64), want_y.detach().numpy())
    assert rel < 2e-3, f"y: relative error {rel:.3g} at {at}"
    rel, at = _worst(x.grad.float().numpy().astype(np.float64), want_x.grad.numpy())
    assert rel < 2e-3, f"x.grad: relative error {rel:.3g} at {at}"
    if layout == "spare":
        assert not x.grad.float().numpy()[..., 3 * h * d:].any()
    kernels = [re.sub(r"\[16,16,\d", "[16,16,ns", n) for n in names if n.startswith("flash")]   # ns: the limits'
    assert kernels[:1] == ["flash_sgmat_forward[16,16,ns]"]
    assert not [n for n in forward if "strided" in n], forward       # read in place, out needs no copy
    into = layout != "same"
    assert kernels[1:] == [f"flash_sgmat_{kind}[16,16,ns{',into' if into else ''}]" for kind in ("dq", "dkv")], backward
    # the gradient of out permuted back (one gather); "same": also the sum of the view's three
    # gradients permuted back
    assert sum("strided" in n for n in backward) == (1 if into else 2), backward


# A 16x16x16 product per subgroup and every lane builtin, on a hand-written kernel: A from
# an f16 array (row-major), B^T from a vec4<u32> array (B read col_major, offset and stride in
# 16-byte units), results stored into a storage array of f32, a workgroup array of vec4<f32>
# (col_major) and of vec4<u32>.
UNIT_KERNEL = """
diagnostic(off, subgroup_uniformity);
enable f16;
enable subgroups;
enable chromium_experimental_subgroup_matrix;
@group(0) @binding(0) var<uniform> unused: vec4<u32>;
@group(0) @binding(1) var<storage, read> A: array<f16>;
@group(0) @binding(2) var<storage, read> B: array<vec4<u32>>;   // B^T, rows of 24 halves
@group(0) @binding(3) var<storage, read_write> C: array<f32>;
@group(0) @binding(4) var<storage, read_write> L: array<f32>;
alias LM = subgroup_matrix_left<f16, 16, 16>;
alias RM = subgroup_matrix_right<f16, 16, 16>;
alias AM = subgroup_matrix_result<f32, 16, 16>;
var<workgroup> sA: array<f16, 2 * 16 * 24>;
var<workgroup> sB: array<vec4<u32>, 16 * 3>;
var<workgroup> sT: array<vec4<f32>, 2 * 16 * 4>;
var<workgroup> sU: array<vec4<u32>, 2 * 16 * 5>;
@compute @workgroup_size(64)
fn main(@builtin(subgroup_id) sg: u32, @builtin(subgroup_invocation_id) lane: u32, @builtin(subgroup_size) n: u32) {
  let t = sg * n + lane;
  for (var e = t; e < 512u; e += 64u) { sA[(e / 16u) * 24u + e % 16u] = A[e]; }   // rows of 24 halves
  for (var e = t; e < 48u; e += 64u) { sB[e] = B[e]; }
  workgroupBarrier();
  let a = subgroupMatrixLoad<LM, row_major>(&sA, sg * 16u * 24u, 24u);
  var acc = AM();
  acc = subgroupMatrixMultiplyAccumulate(a, subgroupMatrixLoad<RM, col_major>(&sB, 0u, 3u), acc);
  subgroupMatrixStore<row_major>(&C, sg * 256u, acc, 16u);
  subgroupMatrixStore<col_major>(&sT, sg * 64u, acc, 4u);
  subgroupMatrixStore<row_major>(&sU, sg * 80u, acc, 5u);
  workgroupBarrier();
  for (var e = lane; e < 256u; e += n) {    // C^T from sT, C from sU (rows of 5 vec4s)
    C[512u + sg * 256u + e] = sT[sg * 64u + e / 4u][e % 4u];
    C[1024u + sg * 256u + e] = bitcast<f32>(sU[sg * 80u + (e / 16u) * 5u + (e % 16u) / 4u][e % 4u]);
  }
  let x = f32(t * t % 7u) - 2.5;
  L[t] = subgroupShuffleXor(x, 5u);
  L[64u + t] = subgroupShuffle(x, (lane * 3u) % 32u);
  L[128u + t] = subgroupBroadcast(x, 7u);
  L[192u + t] = subgroupAdd(x);
  L[256u + t] = subgroupMax(x);
  L[320u + t] = f32(subgroupMin(u32(x + 3.0) + lane));
}
"""


def _run_unit_kernel(code: str, name: str, seed: int):
    """Run emulate(code) (UNIT_KERNEL's bindings) on random A and B; check its three stores of
    the product against numpy and return the lane results."""
    dev = gpu()
    rng = np.random.default_rng(seed)
    a = rng.uniform(-1, 1, (2, 16, 16)).astype(np.float16)
    b = rng.uniform(-1, 1, (16, 16)).astype(np.float16)
    b_rows = np.zeros((16, 24), np.float16)
    b_rows[:, :16] = b.T
    c, lanes = dev.upload(np.full(3 * 512, np.nan, np.float32)), dev.upload(np.full(384, np.nan, np.float32))
    kernel = dev.kernel(name, emulate(code), 2, 2, "IIII")
    dev.launch(kernel, [dev.upload(a.ravel()), dev.upload(b_rows.ravel())], [c, lanes], (0, 0, 0, 0))
    product = a.astype(np.float64) @ b.astype(np.float64)
    got = dev.read(c).reshape(3, 2, 16, 16)
    np.testing.assert_allclose(got[0], product, rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(got[1], product.transpose(0, 2, 1), rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(got[2], product, rtol=1e-5, atol=1e-5)
    return dev.read(lanes)


@pytest.mark.skipif(dawn_child.reason() is not None, reason=dawn_child.reason() or "")
def test_emulated_unit_kernel_matches_numpy():
    lanes = _run_unit_kernel(UNIT_KERNEL, "sgmat_emulate_unit", 7)
    t = np.arange(64)
    x = (t * t % 7 - 2.5).reshape(2, 32)
    lane = np.arange(32)
    want = [x[:, lane ^ 5], x[:, lane * 3 % 32], np.repeat(x[:, 7:8], 32, 1), np.repeat(x.sum(1, keepdims=True), 32, 1),
            np.repeat(x.max(1, keepdims=True), 32, 1),
            np.repeat((x + 3).astype(np.uint32).__add__(lane).min(1, keepdims=True), 32, 1)]
    np.testing.assert_array_equal(lanes.reshape(6, 2, 32), np.array(want, np.float32))


# UNIT_KERNEL with A and the col_major result in one array per subgroup (`&sA[sg]`, `&sT[sg]`,
# literal offsets: the slotted kernels' form).
SLOTTED = {
    "var<workgroup> sA: array<f16, 2 * 16 * 24>;": "var<workgroup> sA: array<array<f16, 16 * 24>, 2>;",
    "var<workgroup> sT: array<vec4<f32>, 2 * 16 * 4>;": "var<workgroup> sT: array<array<vec4<f32>, 16 * 4>, 2>;",
    "sA[(e / 16u) * 24u + e % 16u] = A[e];": "sA[e / 256u][((e % 256u) / 16u) * 24u + e % 16u] = A[e];",
    "subgroupMatrixLoad<LM, row_major>(&sA, sg * 16u * 24u, 24u)": "subgroupMatrixLoad<LM, row_major>(&sA[sg], 0u, 24u)",
    "subgroupMatrixStore<col_major>(&sT, sg * 64u, acc, 4u)": "subgroupMatrixStore<col_major>(&sT[sg], 0u, acc, 4u)",
    "sT[sg * 64u + e / 4u][e % 4u]": "sT[sg][e / 4u][e % 4u]",
}


def _unit_kernel_with(changes: dict[str, str]) -> str:
    """UNIT_KERNEL with each of `changes`' texts (which must be there) replaced."""
    code = UNIT_KERNEL
    for old, new in changes.items():
        assert old in code, old
        code = code.replace(old, new)
    return code


def _slotted_unit_kernel() -> str:
    return _unit_kernel_with(SLOTTED)


@pytest.mark.skipif(dawn_child.reason() is not None, reason=dawn_child.reason() or "")
def test_emulated_slotted_arrays_match_numpy():
    """Matrix loads and stores through `&name[slot]` (arrays of per-subgroup arrays) give the
    products and transposes of the flat kernel."""
    _run_unit_kernel(_slotted_unit_kernel(), "sgmat_emulate_slotted", 8)


# UNIT_KERNEL with A staged as u32 pairs of halves (flash_sgmat's probabilities): the left
# matrix loaded from an array<u32>, offset and stride counted in u32.
AS_U32 = {
    "var<workgroup> sA: array<f16, 2 * 16 * 24>;": "var<workgroup> sA: array<u32, 2 * 16 * 12>;",
    "for (var e = t; e < 512u; e += 64u) { sA[(e / 16u) * 24u + e % 16u] = A[e]; }":
        "for (var e = t; e < 256u; e += 64u) { sA[(e / 8u) * 12u + e % 8u] = "
        "pack2x16float(vec2<f32>(f32(A[2u * e]), f32(A[2u * e + 1u]))); }",
    "subgroupMatrixLoad<LM, row_major>(&sA, sg * 16u * 24u, 24u)": "subgroupMatrixLoad<LM, row_major>(&sA, sg * 16u * 12u, 12u)",
}


@pytest.mark.skipif(dawn_child.reason() is not None, reason=dawn_child.reason() or "")
def test_emulated_loads_from_u32_pairs_match_numpy():
    _run_unit_kernel(_unit_kernel_with(AS_U32), "sgmat_emulate_u32", 9)


def test_emulated_slotted_text_takes_the_slot():
    text = emulate(_slotted_unit_kernel())
    assert "subgroup" not in text
    assert re.search(r"fn emulated_left_sA_row_major\(slot: u32, offset: u32, stride: u32\)", text)
    assert "emulated_left_sA_row_major(sg, 0u, 24u)" in text and "sA[slot][" in text
    assert "emulated_store_sT_col_major(sg, 0u, acc, 4u)" in text and "sT[slot][at / 4u]" in text
    with pytest.raises(ValueError, match="an array of arrays takes one of them"):
        emulate(_slotted_unit_kernel().replace("(&sA[sg], 0u", "(&sA, 0u"))


@pytest.mark.skipif(dawn_child.reason() is not None, reason=dawn_child.reason() or "")
def test_emulated_lane_call_in_divergent_flow_does_not_compile():
    """The exchange's barriers need calls in workgroup-uniform control flow: Tint refuses the
    emulated kernel otherwise (rather than it running wrong)."""
    from anygpu.runtime import GpuError
    code = UNIT_KERNEL.replace("  L[192u + t] = subgroupAdd(x);", "  if (lane < 3u) { L[192u + t] = subgroupAdd(x); }")
    with pytest.raises(GpuError, match="uniform control flow"):
        gpu().kernel("sgmat_emulate_divergent", emulate(code), 2, 2, "IIII")


@pytest.mark.skipif(not dawn_child.HAS_DAWN, reason="needs the extra anygpu[dawn]")
def test_emulated_kernels_on_dawn():
    """Where this process runs on wgpu-native, the tests above run in a child on Dawn (same
    adapter); skipped where Dawn gets no adapter."""
    dawn_child.run_tests(__file__, "not kernels_on_dawn", LP_NATIVE_VECTOR_WIDTH="128")


@pytest.mark.parametrize("kind", flash_sgmat.KINDS)
def test_emulated_flash_text_uses_no_subgroups(kind):
    for shape in (flash_sgmat.Shape(64, 32, 4, True, True, True), flash_sgmat.Shape(16, 16, 1, False, False, False)):
        real = flash_sgmat.generate(kind, shape)
        assert "subgroupMatrixLoad" in real
        emulated = emulate(real)
        assert "subgroup" not in emulated and "enable f16;" in emulated, shape


@pytest.mark.parametrize("change, message", [
    (("subgroupAdd(x)", "subgroupExclusiveAdd(x)"), "subgroupExclusiveAdd"),
    (("subgroupMax(x)", "subgroupMax(x > 0.0)"), "only arithmetic"),
    (("@workgroup_size(64)", "@workgroup_size(WG)"), "pass workgroup_size"),
    (("subgroup_matrix_left<f16, 16, 16>", "subgroup_matrix_left<f32, 16, 16>"), "only f16"),
    (("subgroup_matrix_right<f16, 16, 16>", "subgroup_matrix_right<f16, 8, 16>"), "more than one shape"),
    (("&sT, sg * 64u", "&sA, sg * 64u"), "an array of f16"),
    (("(&sA, sg * 16u * 24u", "(&A2, sg * 16u * 24u"), "module-scope array"),
    (("(&sA, sg * 16u * 24u", "(&sA[sg], 0u"), "not an array of arrays"),
    (("var acc = AM();", "var acc = AM(1.0);"), "zero constructor"),
    (("@builtin(subgroup_size) n: u32", "@builtin(subgroup_size) n: u32, @builtin(num_subgroups) ns: u32"),
     "not emulated"),
])
def test_emulate_refuses_what_it_does_not_know(change, message):
    old, new = change
    assert old in UNIT_KERNEL
    with pytest.raises(ValueError, match=message):
        emulate(UNIT_KERNEL.replace(old, new))
