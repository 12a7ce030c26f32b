"""The generated matmul family, its tuning (ops/matmul_tune.py on ops/tuner.py) and the GPU
timer, against NumPy in float64.

Every candidate config the autotuner may pick is run on odd sizes (edges in every
dimension, scalar loads), vec4-aligned sizes, tile-multiple sizes (no bounds
checks), all four transpositions, a batch with a broadcast operand and alpha; on
f32 operands and, with the f16 candidates added, on f16 ones (summed in f32, one
f16 rounding of the result), where NaN, inf and overflow past 65504 must come out
as float64 rounded to f16 says. Members that read f16 as u32 words ('w') are run on
sizes whose contiguous axes are multiples of 8 (word loads, with edges) and on ones
where an operand falls back to the f16 loads (odd k, odd rows, multiples of 4 only)."""

import json
import re

import numpy as np
import pytest

from anygpu.ops import matmul_gen, matmul_tune, tuner
from anygpu.ops.matmul_gen import MatmulConfig, Problem, Variant

# Beyond the autotuner's lists: scalar-only members, and a k step of 4.
EXTRA_CONFIGS = ("64x128x8_4x8_v1", "32x64x4_4x8_v1p")
CONFIGS = sorted({c.name for c in matmul_tune.GPU_CANDIDATES + matmul_tune.CPU_CANDIDATES} | set(EXTRA_CONFIGS))
F16_CONFIGS = sorted({c.name for c in matmul_tune.GPU_F16_EXTRA + matmul_tune.CPU_F16_EXTRA} | set(CONFIGS))


@pytest.fixture(autouse=True)
def private_cache(tmp_path, monkeypatch):
    """Tuning results go to a temporary folder, never the user's cache."""
    monkeypatch.setenv("ANYGPU_CACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.delenv("ANYGPU_AUTOTUNE", raising=False)


def operands(rng, problem):
    p = problem
    a = rng.standard_normal(((p.batch if p.a_batch else 1), *((p.k, p.m) if p.trans_a else (p.m, p.k))))
    b = rng.standard_normal(((p.batch if p.b_batch else 1), *((p.n, p.k) if p.trans_b else (p.k, p.n))))
    return a.astype(np.float32), b.astype(np.float32)


def expected(problem, a, b):
    a64 = a.astype(np.float64)
    b64 = b.astype(np.float64)
    if problem.trans_a:
        a64 = a64.transpose(0, 2, 1)
    if problem.trans_b:
        b64 = b64.transpose(0, 2, 1)
    return problem.alpha * np.broadcast_to(a64 @ b64, (problem.batch, problem.m, problem.n))


def run_config(dev, config, problem, a, b):
    out = dev.empty(problem.batch * problem.m * problem.n, "f16" if a.dtype == np.float16 else "f32")
    matmul_gen.launch(dev, config, problem, dev.upload(a), dev.upload(b), out)
    return dev.read(out).reshape(problem.batch, problem.m, problem.n)


def assert_matches(got, want):
    scale = max(1.0, float(np.abs(want).max()))
    np.testing.assert_allclose(got, want, rtol=1e-4, atol=2e-5 * scale)


def assert_matches_f16(got, want):
    """An f16 result of an f32 sum: within one f16 step (2^-10 of the value) of float64."""
    assert got.dtype == np.float16
    scale = max(1.0, float(np.abs(want).max()))
    np.testing.assert_allclose(got.astype(np.float64), want, rtol=2.0 ** -10, atol=1e-5 * scale)


def half_operands(rng, problem):
    a, b = operands(rng, problem)
    return a.astype(np.float16), b.astype(np.float16)


def needs_f16(dev):
    if not dev.supports("f16"):
        pytest.skip("adapter without shader-f16")


def family_problems(config):
    """Problems that between them reach every code path of `config` (each operand's
    staging code depends only on its own layout, so NN and TT cover both layouts of both)."""
    tm, tn, tk = config.tile_m, config.tile_n, config.tile_k
    odd = [Problem(3, 67, 45, 33, ta, tb, alpha=0.5 if ta else 1.0) for ta in (False, True) for tb in (False, True)]
    return odd + [
        Problem(1, 1, 1, 1),
        Problem(1, 129, 257, 65),
        Problem(3, 67, 45, 33, False, True, a_batch=False, alpha=-1.5),
        Problem(2, 67, 45, 33, True, False, b_batch=False),
        Problem(1, 68, 44, 36),                  # vec4 loads and stores, edges everywhere
        Problem(1, 68, 44, 36, True, True),
        Problem(2, 2 * tm, 2 * tn, 3 * tk, alpha=2.0),   # whole tiles: no bounds checks
    ]


def word_problems(config):
    """Problems for a member reading f16 as u32 words, one per transposition (four shader
    variants: each compiles for seconds on lavapipe): every staging layout of A and B
    as words, with and without bounds checks, beside operands that fall back to the f16
    loads (an odd k or row length would put a word across two rows; rows of a multiple
    of 4 take vec4<f16>), batches with a broadcast operand, alpha. The odd sizes of
    `family_problems` take no words at all: the same code as the member without 'w'."""
    tm, tn, tk = config.tile_m, config.tile_n, config.tile_k
    return [
        Problem(3, 72, 40, 33),   # odd k: A [m, k] scalar loads, B [k, n] words with a k edge
        Problem(3, 72, 45, 40, False, True, a_batch=False, alpha=-1.5),  # A and B^T words along k, odd n
        Problem(2, 72, 44, 24, True, False, b_batch=False, alpha=0.5),   # A^T words with an m edge; B vec4<f16>
        Problem(2, 2 * tm, 2 * tn, 3 * tk, True, True, alpha=2.0),       # whole tiles: words, no bounds checks
    ]


@pytest.mark.parametrize("dtype, name", [("f32", name) for name in CONFIGS] + [("f16", name) for name in F16_CONFIGS])
def test_every_candidate_config_matches_numpy(dev, rng, dtype, name):
    if dtype == "f16":
        needs_f16(dev)
    config = MatmulConfig.parse(name)
    if not matmul_tune.fits(dev, config):
        pytest.skip(f"{name} needs {config.workgroup_bytes()} bytes of workgroup memory, "
                    f"over this adapter's {dev.max_workgroup_storage}")
    problems = word_problems(config) if config.words else family_problems(config)
    if config.words:   # the problems reach every operand layout as words
        variants = [Variant.of(config, p.m, p.n, p.k, p.trans_a, p.trans_b, dtype) for p in problems]
        assert {(v.trans_a, v.a_words) for v in variants} >= {(False, True), (True, True), (False, False)}
        assert {(v.trans_b, v.b_words) for v in variants} >= {(False, True), (True, True)}
        assert any(not v.b_words and v.b_vec for v in variants)
    for problem in problems:
        if dtype == "f32":
            a, b = operands(rng, problem)
            assert_matches(run_config(dev, config, problem, a, b), expected(problem, a, b))
        else:
            a, b = half_operands(rng, problem)
            assert_matches_f16(run_config(dev, config, problem, a, b), expected(problem, a, b))


@pytest.mark.parametrize("dtype, name, trans", [("f32", "128x256x8_8x16_v4p", (False, False)),
                                               ("f32", "64x64x16_8x8_v4d", (True, True)),
                                               ("f32", "32x64x4_4x8_v1p", (True, False)),
                                               ("f16", "128x64x16_8x8_v4pw", (False, True))])
def test_whole_tile_members_are_trusted_and_write_nothing_past_their_output(dev, rng, dtype, name, trans):
    """A variant without edge checks is made without naga's runtime checks (`//! trusted`):
    right on whole tiles (batched, broadcast, transposed), its output's neighbour untouched;
    variants with an edge or an epilogue stay checked, and short buffers are refused."""
    if dtype == "f16":
        needs_f16(dev)
    config = MatmulConfig.parse(name)
    if not matmul_tune.fits(dev, config):
        pytest.skip("over this adapter's workgroup memory")
    tm, tn, tk = config.tile_m, config.tile_n, config.tile_k
    problem = Problem(3, 2 * tm, tn, 3 * tk, *trans, a_batch=False, alpha=0.5)
    variant = Variant.of(config, problem.m, problem.n, problem.k, *trans, dtype)
    assert "\n//! trusted\n" in matmul_gen.generate(config, variant)
    for m, n, k in ((tm + 1, tn, tk), (tm, tn - 4, tk), (tm, tn, tk + 1)):
        assert "//! trusted" not in matmul_gen.generate(config, Variant.of(config, m, n, k, *trans, dtype))
    assert "//! trusted" not in matmul_gen.generate(config, variant, matmul_gen.Epilogue(bias=True))
    a, b = (half_operands if dtype == "f16" else operands)(rng, problem)
    size = problem.batch * problem.m * problem.n
    out = dev.upload(np.full(size + 4096, 7.0, np.float16 if dtype == "f16" else np.float32))
    matmul_gen.launch(dev, config, problem, dev.upload(a), dev.upload(b), out)
    got = dev.read(out)
    assert np.all(got[size:] == 7.0)
    want = expected(problem, a, b)
    got = got[:size].reshape(want.shape)
    (assert_matches_f16 if dtype == "f16" else assert_matches)(got, want)
    with pytest.raises(ValueError, match="matmul: buffers"):
        matmul_gen.launch(dev, config, problem, dev.upload(a[..., :-1]), dev.upload(b), out)


# ---------------------------------------------------------------------------- stream-K


@pytest.mark.parametrize("name, problem", [
    ("64x64x8_8x8_v4ps7", Problem(1, 192, 128, 80)),          # 60 steps over 7: a tile in two parts
    ("64x64x8_8x8_v4ps5", Problem(2, 128, 192, 72, True, False, alpha=0.5)),
    ("64x64x8_8x8_v4ds3", Problem(3, 64, 64, 256, False, True, a_batch=False, alpha=-2.0)),
    ("64x64x8_8x8_v4ps64", Problem(1, 192, 128, 80, True, True)),  # 1 step each: a tile in up to 10 parts
    ("64x64x8_8x8_v4s13", Problem(2, 128, 64, 24, b_batch=False)),
    ("64x64x8_8x8_v4ps8", Problem(1, 128, 256, 48)),          # 48 steps, 6 each: no tile shared
    ("64x64x8_8x8_v4ps1", Problem(1, 128, 128, 40)),          # one workgroup runs everything
] + [(c.name, Problem(2, 2 * c.tile_m, c.tile_n, 6 * c.tile_k, alpha=1.5)) for c in matmul_tune.GPU_STREAM])
def test_stream_k_form_shares_k_steps_and_adds_the_parts(dev, rng, name, problem):
    """The stream-K form (config `stream` > 0) on whole-tile f32 products: `stream` workgroups
    run even runs of k steps across tiles; a tile's later parts go to W and the fix-up adds
    them. Right against float64 however the runs split the tiles (two parts, many parts of one
    step, none shared), batched, broadcast, transposed, with alpha; one dispatch when no tile
    is shared, two when some is; nothing written past C; NaN and inf reach their rows."""
    config = MatmulConfig.parse(name)
    if not matmul_tune.fits(dev, config):
        pytest.skip("over this adapter's workgroup memory")
    p = problem
    variant = Variant.of(config, p.m, p.n, p.k, p.trans_a, p.trans_b)
    assert matmul_gen.streams(config, variant)
    assert "\n//! trusted\n" in matmul_gen.generate(config, variant)
    a, b = operands(rng, p)
    a[0, 0, 0] = np.nan   # row 0 of A (column 0 of A^T) in the first matrix
    a[0, -1, -1] = np.inf
    size = p.batch * p.m * p.n
    out = dev.upload(np.full(size + 64, 7.0, np.float32))
    before = dev.stats["dispatches"]
    matmul_gen.launch(dev, config, p, dev.upload(a), dev.upload(b), out)
    got = dev.read(out)
    steps = p.k // config.tile_k
    total = p.batch * (p.m // config.tile_m) * (p.n // config.tile_n) * steps
    per = -(-total // min(config.stream, total))
    assert dev.stats["dispatches"] - before == (2 if per % steps and per < total else 1)
    assert np.all(got[size:] == 7.0)
    want = expected(p, a, b)
    got = got[:size].reshape(want.shape)
    np.testing.assert_array_equal(np.isnan(got), np.isnan(want))
    np.testing.assert_array_equal(np.isinf(got), np.isinf(want))
    finite = np.isfinite(want)
    assert finite.mean() < 1.0
    assert_matches(np.where(finite, got, 0.0), np.where(finite, want, 0.0))


def test_stream_k_form_is_only_for_whole_tile_plain_f32_products():
    """Edges, epilogues and f16 operands run the config's ordinary form (its grid of tiles)."""
    config = MatmulConfig.parse("64x64x8_8x8_v4ps7")
    assert config.name == "64x64x8_8x8_v4ps7" and config.stream == 7
    plain = MatmulConfig.parse("64x64x8_8x8_v4p")
    whole = Variant.of(config, 128, 128, 16)
    assert matmul_gen.streams(config, whole) and not matmul_gen.streams(plain, whole)
    assert not matmul_gen.streams(config, whole, matmul_gen.Epilogue(bias=True))
    for m, n, k, dtype in ((129, 128, 16, "f32"), (128, 132, 16, "f32"), (128, 128, 20, "f32"), (128, 128, 16, "f16")):
        variant = Variant.of(config, m, n, k, dtype=dtype)
        assert not matmul_gen.streams(config, variant)
        assert matmul_gen.generate(config, variant).replace(config.name, plain.name) == \
            matmul_gen.generate(plain, variant)
    assert MatmulConfig(64, 64, 8, 8, 8, prefetch=True, stream=70000).problems()
    assert not any(c.stream for c in matmul_tune.TUNABLES["f16"].known(_GpuLike(), None) if c is not None)
    assert set(matmul_tune.GPU_STREAM) <= set(matmul_tune.TUNABLES["f32"].known(_GpuLike(), None))


@pytest.mark.parametrize("problem, bias, streamed", [
    (Problem(1, 128, 128, 48), False, True),     # whole tiles, no epilogue: the stream-K form
    (Problem(1, 128, 128, 48), True, False),     # a bias epilogue cannot stream
    (Problem(2, 129, 128, 48), False, False),    # an edge tile cannot stream
    (Problem(1, 64, 192, 40, True, True), True, False),
])
@pytest.mark.parametrize("unstreamed", ["32x32x16_4x4_v4", None])
def test_a_product_that_cannot_stream_takes_the_best_unstreamed_config(dev, rng, monkeypatch, problem, bias,
                                                                        streamed, unstreamed):
    """Where the tuned winner is a stream-K form the product cannot run (an epilogue, edge
    tiles), the product takes the tuner's best without stream-K forms (which may be the simple
    kernel, None) instead of the winner's ordinary grid (a few 128-wide tiles on a
    132-multiprocessor GPU); also when the epilogue comes later, fused from an elementwise op
    that reads the product. Right either way."""
    streaming = MatmulConfig.parse("64x64x8_8x8_v4ps3")
    plain = MatmulConfig.parse(unstreamed) if unstreamed else None
    plain_name = "matmul_" + plain.name if plain else "matmul_tiled"
    asked = []

    def choose(dev_, problem_, dtype="f32", stream=True):
        asked.append(stream)
        return streaming if stream else plain
    monkeypatch.setattr(matmul_tune, "choose", choose)
    launched = []
    real_launch = dev.launch

    def launch(kernel, *args, **kwargs):
        launched.append(kernel.name)
        return real_launch(kernel, *args, **kwargs)
    monkeypatch.setattr(dev, "launch", launch)
    a, b = operands(rng, problem)
    b_host = rng.standard_normal(problem.n).astype(np.float32) if bias else None
    a_gpu, b_gpu, bias_gpu = dev.upload(a), dev.upload(b), dev.upload(b_host) if bias else None
    want = expected(problem, a, b) + (b_host.astype(np.float64) if bias else 0.0)
    for fuse in (True, False):
        monkeypatch.setattr(dev, "fuse", fuse)
        del asked[:], launched[:]
        got = dev.read(dev.matmul_strided(a_gpu, b_gpu, *problem, bias=bias_gpu)).reshape(want.shape)
        assert_matches(got, want)
        assert asked == [True, False]
        assert launched[0] == ("matmul_" + streaming.name if streamed else plain_name) + ("+epilogue" if bias else "")
        if fuse:  # an elementwise op that reads the product joins it as its epilogue: never streamed
            del launched[:]
            got = dev.read(dev.scale(dev.matmul_strided(a_gpu, b_gpu, *problem, bias=bias_gpu), -2.0))
            assert_matches(got.reshape(want.shape), -2.0 * want)
            assert launched == [plain_name + "+epilogue"]
    assert matmul_gen.can_stream(streaming, problem, "f32",
                                 matmul_gen.Epilogue(bias=True) if bias else None) == streamed


def test_the_unstreamed_tunable_has_no_stream_forms_and_its_own_cache_entries():
    gpu = _GpuLike()
    for dtype in ("f32", "f16"):
        unstreamed, full = matmul_tune.UNSTREAMED[dtype], matmul_tune.TUNABLES[dtype]
        assert not any(c.stream for c in unstreamed.known(gpu, None) if c is not None)
        assert {c for c in full.known(gpu, None) if c is None or not c.stream} == set(unstreamed.known(gpu, None))
        assert unstreamed.name != full.name and unstreamed.version == full.version


class _GpuLike:
    """Enough of a device for matmul_tune's candidate lists: an H200's limits."""

    adapter_type = "DiscreteGPU"
    limits = {"max-compute-invocations-per-workgroup": 1024, "max-compute-workgroup-size-x": 1024,
              "max-compute-workgroup-size-y": 1024}
    max_workgroup_storage = 49152


# 128x64x16_8x8_v4d, not 128x128x16: that one's tiles take 33280 bytes of workgroup memory, over
# lavapipe's 32768 (Dawn refuses the pipeline; wgpu-native did not check).
@pytest.mark.parametrize("name", ["simple", "64x64x8_8x8_v4p", "32x64x4_4x8_v1p", "64x64x16_8x8_v4dh",
                                  "128x128x32_8x8_v4ph", "128x64x16_8x8_v4d", "64x64x16_8x8_v4dw"])
@pytest.mark.parametrize("trans_a, trans_b", [(False, False), (True, True)])
def test_f16_nan_inf_and_overflow_come_out_as_float64_rounded_to_f16(dev, rng, name, trans_a, trans_b):
    needs_f16(dev)
    config = matmul_tune.TUNABLE.parse(name)
    # Word members get contiguous axes of multiples of 8 (so NaN and inf pass through
    # unpack2x16float), with edges in m, n and k; the others odd sizes.
    problem = Problem(2, 72, 48, 40, trans_a, trans_b) if config and config.words else Problem(2, 67, 45, 70, trans_a, trans_b)
    if config and config.words:
        variant = Variant.of(config, problem.m, problem.n, problem.k, trans_a, trans_b, "f16")
        assert variant.a_words and variant.b_words
    a, b = half_operands(rng, problem)
    a_view = a.transpose(0, 2, 1) if trans_a else a   # [batch, m, k] views of the storage
    b_view = b.transpose(0, 2, 1) if trans_b else b   # [batch, k, n]
    a_view[0, 3, 5] = np.nan          # row 3 of C[0]: NaN
    b_view[0, 7, 4] = -np.inf         # column 4 of C[0]: +-inf (NaN in row 3)
    a_view[1, 10, 0] = np.inf         # row 10 of C[1]: +-inf
    a_view[1, 20, :] = 300.0          # C[1][20, 30] = k * 300 * 300 > 65504: inf
    b_view[1, :, 30] = 300.0
    with np.errstate(over="ignore"):
        want = expected(problem, a, b).astype(np.float16)
    got = run_config(dev, config, problem, a, b)
    assert np.isnan(got[0, 3]).all() and np.isposinf(got[1, 20, 30])
    np.testing.assert_array_equal(np.isnan(got), np.isnan(want))
    np.testing.assert_array_equal(np.isinf(got) * np.sign(got), np.isinf(want) * np.sign(want))
    finite = np.isfinite(want)
    assert_matches_f16(got[finite], expected(problem, a, b)[finite])


def test_f16_tiles_need_f16_operands():
    config = MatmulConfig.parse("64x64x16_8x8_v4dh")
    assert config.half and config.workgroup_bytes() == MatmulConfig.parse("64x64x16_8x8_v4d").workgroup_bytes() // 2
    with pytest.raises(ValueError, match="f16 tiles need f16 operands"):
        matmul_gen.generate(config, Variant.of(config, 64, 64, 64))
    source = matmul_gen.generate(config, Variant.of(config, 64, 64, 64, dtype="f16"))
    assert source.startswith("enable f16;") and "var<workgroup> As: array<vec4<f16>" in source
    assert "vec4<f32>(0.0)" in source and "acc_1_3_1 = fma(" in source   # sums stay f32


def test_word_members_read_f16_as_u32_words_where_rows_allow():
    config = MatmulConfig.parse("128x64x16_8x8_v4pw")
    assert config.words and not config.half and config.name == "128x64x16_8x8_v4pw"
    assert config.workgroup_bytes() == MatmulConfig.parse("128x64x16_8x8_v4p").workgroup_bytes()  # f32 tiles
    assert MatmulConfig.parse("64x64x16_8x8_v4phw").problems() and MatmulConfig.parse("64x64x8_8x8_v1w").problems()
    assert MatmulConfig(64, 64, 4, 4, 4, prefetch=True, words=True).problems()   # k step under 8
    with pytest.raises(ValueError, match="word loads need f16 operands"):
        matmul_gen.generate(config, Variant.of(config, 64, 64, 64))
    v = Variant.of(config, 72, 40, 24, dtype="f16")
    assert (v.a_words, v.b_words, v.check_k) == (True, True, True)
    source = matmul_gen.generate(config, v)
    assert "var<storage, read> A: array<vec4<u32>>" in source and "var<storage, read> B: array<vec4<u32>>" in source
    assert "unpack2x16float" in source and "var<workgroup> As: array<vec4<f32>" in source
    assert "array<vec4<f16>>" in source   # C: rounded once to f16, stored as before
    # An odd k (A's rows) or row length of 4 but not 8 (B's): those operands take the f16 loads.
    v = Variant.of(config, 72, 44, 33, dtype="f16")
    assert (v.a_words, v.b_words, v.a_vec, v.b_vec) == (False, False, False, True)
    source = matmul_gen.generate(config, v)
    assert "A: array<f16>" in source and "B: array<vec4<f16>>" in source and "unpack2x16float" not in source
    v = Variant.of(config, 67, 40, 40, trans_a=True, trans_b=True, dtype="f16")
    assert (v.a_words, v.b_words) == (False, True)
    assert not Variant.of(MatmulConfig.parse("128x64x16_8x8_v4p"), 72, 40, 24, dtype="f16").a_words
    # The f16 tunable buckets word-aligned products apart; the f32 one does not.
    f16, f32 = matmul_tune.TUNABLES["f16"], matmul_tune.TUNABLES["f32"]
    assert "-vec8-" in f16.bucket(matmul_tune.key(Problem(1, 72, 40, 24), "f16"))
    assert "-vec4-" in f16.bucket(matmul_tune.key(Problem(1, 76, 36, 28), "f16"))
    assert "-vec4-" in f32.bucket(matmul_tune.key(Problem(1, 72, 40, 24)))
    assert f16.version != f32.version


@pytest.mark.parametrize("problem", [Problem(3, 67, 45, 33, True, True, alpha=0.25), Problem(1, 129, 257, 65)])
def test_simple_kernel_is_still_correct(dev, rng, problem):
    a, b = operands(rng, problem)
    assert_matches(run_config(dev, None, problem, a, b), expected(problem, a, b))


def test_generated_code_has_no_function_scope_arrays_or_inner_loops():
    config = MatmulConfig.parse("128x128x8_8x8_v4p")
    source = matmul_gen.generate(config, Variant.of(config, 1000, 1000, 1000))
    spaces = re.findall(r"\bvar(?:<([^>]*)>)?\s+\w+\s*:\s*array", source)
    assert sorted(spaces) == ["storage, read", "storage, read", "storage, read_write", "workgroup", "workgroup"]
    assert "var<function>" not in source and "var<private>" not in source
    assert len(re.findall(r"\bfor\s*\(", source)) == 1      # only the loop over k slices
    assert source.count("acc_1_3_1 = fma(") == config.tile_k  # fully unrolled


def test_variant_reflects_alignment_and_edges():
    config = MatmulConfig.parse("64x64x16_8x8_v4p")
    v = Variant.of(config, 128, 64, 32)
    assert (v.a_vec, v.b_vec, v.c_vec, v.check_m, v.check_n, v.check_k) == (True, True, True, False, False, False)
    v = Variant.of(config, 130, 66, 33, trans_a=True, trans_b=True)
    assert (v.a_vec, v.b_vec, v.c_vec) == (False, False, False)
    assert (v.check_m, v.check_n, v.check_k) == (True, True, True)
    assert not Variant.of(MatmulConfig.parse("64x64x16_8x8_v1"), 128, 64, 32).a_vec


def test_config_names_round_trip_and_bad_configs_are_refused():
    for name in F16_CONFIGS:
        assert MatmulConfig.parse(name).name == name
    with pytest.raises(ValueError, match="cannot parse"):
        MatmulConfig.parse("128x128")
    assert MatmulConfig(96, 64, 8, 8, 8).problems()      # not a power of two
    assert MatmulConfig(256, 256, 16, 4, 4).problems()   # 4096 threads
    with pytest.raises(ValueError, match="matmul config"):
        matmul_gen.generate(MatmulConfig(64, 64, 8, 3, 8), Variant.of(MatmulConfig(64, 64, 8, 4, 8), 8, 8, 8))


# ---------------------------------------------------------------------------- matmul_strided


@pytest.mark.parametrize("dtype", ["f32", "f16"])
@pytest.mark.parametrize("autotune_env", ["0", "1"])
def test_matmul_strided_through_the_family(dev, rng, monkeypatch, autotune_env, dtype):
    """Products big enough for the heuristic to pick a family member, with the public op."""
    if dtype == "f16":
        needs_f16(dev)
    monkeypatch.setenv("ANYGPU_AUTOTUNE", autotune_env)
    for problem in (Problem(2, 260, 132, 250, False, True, a_batch=False, alpha=0.5), Problem(1, 256, 256, 260)):
        assert matmul_tune.heuristic(dev, problem) is not None
        a, b = operands(rng, problem) if dtype == "f32" else half_operands(rng, problem)
        out = dev.matmul_strided(dev.upload(a), dev.upload(b), *problem)
        assert out.dtype == dtype
        got = dev.read(out).reshape(problem.batch, problem.m, problem.n)
        (assert_matches if dtype == "f32" else assert_matches_f16)(got, expected(problem, a, b))


def test_a_config_that_does_not_compile_falls_back_to_the_simple_kernel(dev, rng, monkeypatch):
    broken = MatmulConfig.parse("64x32x16_8x4_v4p")
    real_generate = matmul_gen.generate

    def generate(config, variant):
        return "this is not WGSL" if config == broken else real_generate(config, variant)
    monkeypatch.setattr(matmul_gen, "generate", generate)
    monkeypatch.setattr(matmul_tune, "heuristic", lambda dev, problem: broken)
    problem = Problem(1, 33, 65, 17)
    monkeypatch.setenv("ANYGPU_AUTOTUNE", "0")
    a, b = operands(rng, problem)
    tuner.forget_choices(dev)
    mark = ("matmul", broken.name)
    try:
        out = dev.matmul(dev.upload(a), dev.upload(b), problem.m, problem.n, problem.k)
        assert_matches(dev.read(out).reshape(1, problem.m, problem.n), expected(problem, a, b))
        assert mark in tuner._state(dev).broken
        assert matmul_tune.choose(dev, problem) is None  # the broken guess is not picked again
        # and the tuner skips it, reporting why
        result = tuner.tune(dev, matmul_tune.TUNABLE, matmul_tune.key(problem),
                            candidates=[None, broken, MatmulConfig.parse("32x32x16_4x4_v4")])
        assert result.timings[broken.name].startswith("failed")
        assert result.choice != broken
    finally:
        tuner._state(dev).broken.pop(mark, None)
        tuner.forget_choices(dev)


# ---------------------------------------------------------------------------- autotuner


def test_tuning_picks_a_verified_config_and_the_cache_round_trips(dev, monkeypatch, tmp_path):
    op = matmul_tune.TUNABLE
    problem = Problem(1, 96, 80, 72)
    small = MatmulConfig.parse("32x32x16_4x4_v4")
    result = tuner.tune(dev, op, matmul_tune.key(problem), candidates=[None, small], rounds=1, budget_s=0.001)
    assert set(result.timings) == {"simple", small.name}
    # timed (>= 0: two timestamps of a tiny product can coincide), or dropped as slow under a loaded
    # CI machine's timing noise (tuner.time_candidate); seen once each under make test on lavapipe
    assert all(t >= 0 if isinstance(t, float) else t.startswith("slow:") for t in result.timings.values()), \
        result.timings
    assert result.choice in (None, small)

    assert tuner.store(dev, op, matmul_tune.key(problem), result)
    path = tmp_path / "cache" / tuner.CACHE_FILE
    data = json.loads(path.read_text())
    key = tuner.cache_key(dev, op, matmul_tune.key(problem))
    entry = data["entries"][key]
    assert entry["choice"] == op.label(result.choice) and "m128-n64-k64-NN-vec4-single" in key
    assert entry["problem"] == repr(("f32", 1, 96, 80, 72, False, False, True, True))
    assert [p.name for p in path.parent.iterdir()] == [tuner.CACHE_FILE]  # no temporary left behind

    # A product of the same bucket takes the stored winner without tuning again (one
    # the device's candidate list offers: other names are ignored).
    other = Problem(1, 100, 76, 68)
    offered = op.candidates(dev, matmul_tune.key(other))[-1]
    data["entries"][key] = {"choice": offered.name, "seconds": 1.0}
    path.write_text(json.dumps(data))
    monkeypatch.setattr(op, "tune_from", {"cpu": 0, "gpu": 0})
    monkeypatch.setattr(tuner, "tune", lambda *args, **kwargs: pytest.fail("tuned despite a cached winner"))
    tuner.forget_choices(dev)
    assert op.bucket(matmul_tune.key(other)) == op.bucket(matmul_tune.key(problem))
    assert matmul_tune.choose(dev, other) == offered
    tuner.forget_choices(dev)


def test_cached_winner_of_the_bucket_is_used_where_its_tile_is_not_timed(dev, monkeypatch, tmp_path):
    """A bucket spans sizes whose candidate lists differ (no tile over twice the product is
    timed); a winner tuned at one size is used at the others, not tuned over again."""
    op = matmul_tune.TUNABLE
    wide, narrow = Problem(1, 90, 90, 64), Problem(1, 50, 50, 64)
    assert op.bucket(matmul_tune.key(wide)) == op.bucket(matmul_tune.key(narrow))
    big = max(op.candidates(dev, matmul_tune.key(wide))[1:], key=lambda c: c.tile_m)
    assert big not in op.candidates(dev, matmul_tune.key(narrow)) and big.tile_m > 2 * narrow.m
    path = tmp_path / "cache" / tuner.CACHE_FILE
    assert tuner.store(dev, op, matmul_tune.key(wide), tuner.TuneResult(big, 1e-3), path)
    monkeypatch.setattr(op, "tune_from", {"cpu": 0, "gpu": 0})
    monkeypatch.setattr(tuner, "tune", lambda *args, **kwargs: pytest.fail("tuned despite a cached winner"))
    tuner.forget_choices(dev)
    assert matmul_tune.choose(dev, narrow) == big
    tuner.forget_choices(dev)


def test_f16_products_are_tuned_apart_with_their_own_candidates(dev, rng, monkeypatch, tmp_path):
    """f16 products have their own tunable (bucket, cache entry, broken marks) whose
    candidates add the f16-tile members, each checked against float64 before it is timed."""
    needs_f16(dev)
    f16, f32 = matmul_tune.TUNABLES["f16"], matmul_tune.TUNABLES["f32"]
    problem = Problem(1, 70, 90, 41, True, False)
    key = matmul_tune.key(problem, "f16")
    assert f16.bucket(key).startswith("f16-") and f16.name != f32.name
    half = [c for c in f16.known(dev, key) if c is not None and c.half]
    assert half and not any(c is not None and c.half for c in f32.known(dev, matmul_tune.key(problem)))
    small = MatmulConfig.parse("32x32x16_4x4_v4h")
    result = tuner.tune(dev, f16, key, candidates=[None, small], rounds=1, budget_s=0.001)
    assert set(result.timings) == {"simple", small.name}
    # both passed the float64 check: timed, or dropped as slow (one run over ten times the best, which
    # a loaded 2-core CI machine can cause: tuner.time_candidate)
    assert all(isinstance(t, float) or t.startswith("slow:") for t in result.timings.values()), result.timings
    assert tuner.store(dev, f16, key, result)
    entries = tuner.load_cache(tmp_path / "cache" / tuner.CACHE_FILE)
    assert entries[tuner.cache_key(dev, f16, key)]["choice"] == f16.label(result.choice)
    assert tuner.cache_key(dev, f32, matmul_tune.key(problem)) not in entries
    # A config broken for f16 stays usable for f32.
    monkeypatch.setattr(matmul_tune, "heuristic", lambda dev, problem: small)
    monkeypatch.setenv("ANYGPU_AUTOTUNE", "0")
    tuner.forget_choices(dev)
    try:
        matmul_tune.forget(dev, small, "test", "f16")
        assert matmul_tune.choose(dev, problem, "f16") is None and matmul_tune.choose(dev, problem) == small
    finally:
        tuner._state(dev).broken.pop((f16.name, small.name), None)
        tuner.forget_choices(dev)
    a, b = half_operands(rng, problem)
    got = dev.read(dev.matmul_strided(dev.upload(a), dev.upload(b), *problem)).reshape(1, 70, 90)
    assert_matches_f16(got, expected(problem, a, b))


def test_first_use_tunes_stores_and_computes_right(dev, rng, monkeypatch, tmp_path):
    # The whole bucket on first use: under the default budget a cold driver (its pipelines compiled
    # for the first time on a fresh H200, 12 test processes beside) left it pending, nothing stored.
    monkeypatch.setenv("ANYGPU_TUNE_BUDGET", "inf")
    monkeypatch.setattr(matmul_tune.TUNABLE, "tune_from", {"cpu": 0, "gpu": 0})
    monkeypatch.setattr(matmul_tune, "CPU_CANDIDATES", (MatmulConfig.parse("32x32x16_4x4_v4"),))
    monkeypatch.setattr(matmul_tune, "GPU_CANDIDATES", (MatmulConfig.parse("32x32x16_4x4_v4"),))
    tuner.forget_choices(dev)
    problem = Problem(1, 70, 90, 40, True, False)
    a, b = operands(rng, problem)
    out = dev.matmul_strided(dev.upload(a), dev.upload(b), *problem)
    assert_matches(dev.read(out).reshape(1, 70, 90), expected(problem, a, b))
    entries = tuner.load_cache(tmp_path / "cache" / tuner.CACHE_FILE)
    assert tuner.cache_key(dev, matmul_tune.TUNABLE, matmul_tune.key(problem)) in entries
    tuner.forget_choices(dev)


def test_autotune_off_never_tunes_nor_touches_the_cache(dev, rng, monkeypatch, tmp_path):
    monkeypatch.setenv("ANYGPU_AUTOTUNE", "0")
    monkeypatch.setattr(matmul_tune.TUNABLE, "tune_from", {"cpu": 0, "gpu": 0})
    monkeypatch.setattr(tuner, "tune", lambda *args, **kwargs: pytest.fail("tuned with ANYGPU_AUTOTUNE=0"))
    problem = Problem(1, 300, 260, 270)
    assert matmul_tune.choose(dev, problem) == matmul_tune.heuristic(dev, problem)
    a, b = operands(rng, problem)
    out = dev.matmul(dev.upload(a[0]), dev.upload(b[0]), 300, 260, 270)
    assert_matches(dev.read(out).reshape(1, 300, 260), expected(problem, a, b))
    assert not (tmp_path / "cache").exists()


@pytest.mark.parametrize("content", ["{not json", json.dumps({"format": 99, "entries": {}}),
                                     json.dumps({"format": 1, "entries": {"x": "y"}})])
def test_a_damaged_cache_is_ignored_and_replaced(dev, tmp_path, content):
    path = tmp_path / "cache" / tuner.CACHE_FILE
    path.parent.mkdir()
    path.write_text(content)
    op, problem = matmul_tune.TUNABLE, matmul_tune.key(Problem(1, 64, 64, 64))
    entries = tuner.load_cache(path)
    assert tuner.cache_key(dev, op, problem) not in entries
    assert tuner.store(dev, op, problem, tuner.TuneResult(None, 1e-3), path)
    assert tuner.load_cache(path)[tuner.cache_key(dev, op, problem)]["choice"] == "simple"


def test_cached_winner_that_is_unknown_or_too_big_is_not_used(dev, monkeypatch, tmp_path):
    op = matmul_tune.TUNABLE
    monkeypatch.setattr(op, "tune_from", {"cpu": 0, "gpu": 0})
    monkeypatch.setenv("ANYGPU_TUNE_DEFAULTS", "0")   # the shipped defaults would answer first
    problem = Problem(1, 64, 64, 64)
    path = tmp_path / "cache" / tuner.CACHE_FILE
    for name in ("garbage", "1024x1024x64_4x4_v4"):
        path.parent.mkdir(exist_ok=True)
        path.write_text(json.dumps({"format": tuner.CACHE_FORMAT,
                                    "entries": {tuner.cache_key(dev, op, matmul_tune.key(problem)): {"choice": name}}}))
        tuner.forget_choices(dev)
        tuned = []
        monkeypatch.setattr(tuner, "tune", lambda dev, op, problem: tuned.append(problem) or
                            tuner.TuneResult(None, 1.0))
        # the tuner's answer (None), or its untuned pick while it tunes incrementally: never the entry
        chosen = matmul_tune.choose(dev, problem)
        assert chosen is None or chosen.name != name
        assert tuned in ([], [matmul_tune.key(problem)])
    tuner.forget_choices(dev)


def test_cache_folder_follows_the_environment(monkeypatch, tmp_path):
    monkeypatch.delenv("ANYGPU_CACHE_DIR")
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    assert tuner.cache_dir() == tmp_path / "xdg" / "anygpu"
    monkeypatch.delenv("XDG_CACHE_HOME")
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    assert tuner.cache_dir() == tmp_path / "home" / ".cache" / "anygpu"
    monkeypatch.setenv("ANYGPU_CACHE_DIR", str(tmp_path / "mine"))
    assert tuner.cache_path() == tmp_path / "mine" / tuner.CACHE_FILE


@pytest.mark.parametrize("name, dtype", [("128x128x8_8x8_v4p", "f32"), ("128x64x16_8x8_v4pw", "f16")])
def test_small_check_problem_generates_the_same_code(name, dtype):
    config = MatmulConfig.parse(name)
    for problem in (Problem(4, 1000, 999, 1001, True, False), Problem(1, 4096, 4096, 4096), Problem(1, 5, 7, 3),
                    Problem(2, 1000, 1012, 1004, True, True), Problem(1, 4104, 2052, 1032, False, True)):
        small = matmul_tune.small_problem(config, problem)
        assert small.m <= 2 * config.tile_m and small.k <= 3 * config.tile_k
        assert Variant.of(config, small.m, small.n, small.k, small.trans_a, small.trans_b, dtype) == \
            Variant.of(config, problem.m, problem.n, problem.k, problem.trans_a, problem.trans_b, dtype)


# ---------------------------------------------------------------------------- GPU timer


def test_time_gpu_measures_dispatches_or_says_it_cannot(dev, rng):
    x = dev.upload(rng.standard_normal(4096).astype(np.float32))
    seconds = dev.time_gpu(lambda: [dev.scale(x, 2.0) for _ in range(5)])
    if "timestamp-query" in dev.features:
        assert isinstance(seconds, float) and 0 < seconds < 10
    else:
        assert seconds is None
    # A copy splits the compute pass: no timing, but the work is done.
    y = dev.empty(4096)
    assert dev.time_gpu(lambda: dev.copy(dev.scale(x, 3.0), y)) is None
    np.testing.assert_allclose(dev.read(y), 3.0 * dev.read(x), rtol=1e-6)
    assert dev.time_gpu(lambda: None) is None


class FakeDevice:
    """What the heuristic reads of a device."""

    def __init__(self, adapter_type="DiscreteGPU", workgroup_bytes=49152):
        self.adapter_type = adapter_type
        self.max_workgroup_storage = workgroup_bytes
        self.limits = {"max-compute-invocations-per-workgroup": 1024, "max-compute-workgroup-size-x": 1024,
                       "max-compute-workgroup-size-y": 1024}


@pytest.mark.parametrize("problem, expected", [
    (Problem(1, 40, 40, 40), None),                               # tiny: the simple kernel
    (Problem(1, 512, 512, 512), "32x32x16_4x4_v4"),
    (Problem(1, 1024, 1024, 1024), "64x64x16_8x8_v4d"),
    (Problem(1, 4096, 4096, 4096), "128x128x16_8x8_v4p"),
    (Problem(64, 512, 512, 64, False, True), "128x64x16_8x8_v4p"),   # short k
])
def test_gpu_heuristic_follows_the_sweep(problem, expected):
    config = matmul_tune.heuristic(FakeDevice(), problem)
    assert (config.name if config else None) == expected


def test_heuristic_respects_small_workgroup_memory():
    config = matmul_tune.heuristic(FakeDevice(workgroup_bytes=16384), Problem(1, 1024, 1024, 1024))
    assert config is not None and config.workgroup_bytes() <= 16384
    assert matmul_tune.heuristic(FakeDevice("CPU"), Problem(1, 1024, 1024, 1024)).name == "128x128x8_8x16_v4p"
