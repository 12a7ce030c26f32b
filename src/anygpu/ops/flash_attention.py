"""Flash attention (Layer 0): softmax(scale q k^T + mask) v without the [length, source]
score matrix in memory, forward and backward (FlashAttention-2's algorithm).

q [batch, length, embed], k [batch, source, embed], v [batch, source, embed_v] (contiguous,
f32 or f16 storage, f32 math) -> out [batch, length, embed_v] and lse [batch, length] (f32),
the log of each row's softmax denominator (m + log l). The backward recomputes the
probabilities from lse: P = exp(scale q k^T + mask - lse), with Dvec = rowsum(dO * O),
dV = P^T dO, dS = P * (dP - Dvec) where dP = dO v^T, dQ = scale dS k, dK = scale dS^T q.

Masks: `causal` (torch's is_causal, top-left aligned: key j is seen by query i when j <= i)
is compiled in and skips the keys past each row's diagonal; `mask` is an additive f32 buffer
read through strides (MaskStrides: a boolean mask is passed as 0 / -inf). A row whose every
key is masked gives 0 (torch's SDPA since 2.5, `_safe_softmax`), and zero gradients; its lse
is stored as +3e38 so that the backward's P is 0 there without a branch. Dropout reproduces
ops/random.dropout's mask bit for bit (the same hash of (seed, flat score index)).

Two kernel families share the algorithm:

- portable (this file's `_portable_*`): one thread per query row (forward, dQ) or key row
  (dK, dV), q / O / the gradients in named vec4 registers, keys in chunks of `chunk` with one
  online-softmax rescale per chunk; no workgroup memory and no barriers (lavapipe's barriers
  are slow). Runs on every adapter.
- matrix (ops/flash_sgmat.py): QK^T, PV and the backward's products on subgroup matrices
  (Dawn's chromium_experimental_subgroup_matrix, f16 operands, f32 accumulation), the online
  softmax on the subgroup's lanes in f32.

The matrix kernels read q, k, v through `Rows` (strided views in place), write out through
`out_rows` (e.g. [B, T, H, D] order for nanoGPT's heads), and their backward can write the three
gradients where q, k, v lie in one buffer (`into`, for views of one tensor that `disjoint`
proves apart: nn.functional records SDPA against that tensor then).

Routing (`variant`): ANYGPU_FLASH=0 never, =1 wherever a variant applies (the matrix one for
f16 on matrix units, else the portable one), =matrix / =portable only that family, unset:
the matrix variant for f16 on matrix units, else today's path (ops/attention.py and
nn.functional's composed SDPA): the portable kernels are not measured faster than it
(benchmarks/attention_flash.py)."""

from __future__ import annotations

import os
from typing import NamedTuple

from . import flash_sgmat
from ._common import check_buffer, check_positive
from .flash_sgmat import PARAM_FORMAT

__all__ = ["flash_attention", "flash_attention_backward"]

MAX_EMBED = 128        # head dims served (registers per thread grow with it)
_PARAMS, _HASH = flash_sgmat.PARAMS_WGSL, flash_sgmat.HASH_WGSL   # one Params block for both families


class MaskStrides(NamedTuple):
    """Where mask element (z, i, j) lies: (z // inner) * outer_stride + (z % inner) *
    inner_stride + i * row_stride + j * col_stride (0 strides broadcast)."""

    inner: int = 1
    outer_stride: int = 0
    inner_stride: int = 0
    row_stride: int = 0
    col_stride: int = 1


class Rows(NamedTuple):
    """Where row g of batch entry z of q, k or v starts, in elements: offset + (z // inner) *
    outer_stride + (z % inner) * inner_stride + g * row_stride (its elements then contiguous).
    The matrix kernels read strided views in place through these (each a multiple of 8: whole
    16-byte units); the portable ones take contiguous operands only."""

    inner: int
    outer_stride: int
    inner_stride: int
    row_stride: int
    offset: int = 0

    @classmethod
    def contiguous(cls, rows: int, cols: int) -> "Rows":
        return cls(1, rows * cols, 0, cols, 0)


def fold_batch(sizes, strides) -> tuple[int, int, int] | None:
    """(inner, outer_stride, inner_stride) such that batch entry z (row-major over dims of
    `sizes` with element `strides`) lies at (z // inner) * outer_stride + (z % inner) *
    inner_stride; None where the dims do not fold into two such levels."""
    groups: list[tuple[int, int]] = []   # (size, stride) of merged dims, outer first
    for size, stride in zip(sizes, strides):
        if size == 1:
            continue
        if groups and groups[-1][1] == stride * size:
            groups[-1] = (groups[-1][0] * size, stride)
        else:
            groups.append((size, stride))
    if len(groups) > 2:
        return None
    (_, outer_stride), (inner, inner_stride) = [(1, 0)] * (2 - len(groups)) + groups
    return inner, outer_stride, inner_stride


def _levels(r: Rows, batch: int, n: int, cols: int) -> list[tuple[int, int]]:
    """(stride, count) of the index levels that place r's elements, smallest stride first."""
    inner = min(r.inner, batch)
    levels = [(1, cols), (r.inner_stride, inner), (r.row_stride, n), (r.outer_stride, -(-batch // r.inner))]
    return sorted((stride, count) for stride, count in levels if count > 1)


def disjoint(views) -> bool:
    """Whether the elements of `views` ((Rows, batch, rows, cols) each) lie at distinct
    positions, each view's and all of them together (so that gradients can be written to
    them without a sum). A sufficient test: the views share their strides and counts, the
    levels below some k nest (each stride at least what the levels below span), the views'
    offsets are that span apart, and the levels from k on nest over all of the views' spans.
    False where it cannot tell (e.g. nanoGPT's q, k, v split from one [B, T, 3C] product:
    True; sdpa(x, x, x): False)."""
    structures = {tuple(_levels(r, batch, n, cols)) for r, batch, n, cols in views}
    if len(structures) != 1:
        return False
    (levels,) = structures
    offsets = sorted(Rows(*r).offset for r, *_ in views)
    for k in range(len(levels) + 1):
        span, ok = 1, True
        for stride, count in levels[:k]:
            ok = ok and stride >= span
            span += (count - 1) * stride
        ok = ok and all(b - a >= span for a, b in zip(offsets, offsets[1:]))
        span += offsets[-1] - offsets[0]
        for stride, count in levels[k:]:
            ok = ok and stride >= span
            span += (count - 1) * stride
        if ok:
            return True
    return False


def mask_strides(mask_shape, scores_shape) -> MaskStrides | None:
    """MaskStrides reading a contiguous mask of `mask_shape` broadcast to `scores_shape`
    (batch dims..., length, source), or None where the batch dims do not fold into two
    levels (then expand the mask first)."""
    mask_shape, scores_shape = tuple(mask_shape), tuple(scores_shape)
    shape = (1,) * (len(scores_shape) - len(mask_shape)) + mask_shape
    strides, step = [], 1
    for size in reversed(shape):
        strides.append(step if size != 1 else 0)
        step *= size
    strides.reverse()
    folded = fold_batch(scores_shape[:-2], strides[:-2])
    return None if folded is None else MaskStrides(*folded, strides[-2], strides[-1])


def _setting() -> str:
    """ANYGPU_FLASH: "0" (off), "1" (on), "portable" / "matrix" (only that family; for
    benchmarks), "" (the default routing)."""
    value = os.environ.get("ANYGPU_FLASH", "").strip().lower()
    if value in ("1", "true", "on", "yes"):
        return "1"
    if value in ("0", "false", "off", "no"):
        return "0"
    return value if value in ("portable", "matrix") else ""


def variant(dev, dtype: str, embed: int, embed_v: int, batch: int = 1) -> str | None:
    """Which flash kernels serve attention of this dtype and head dims on `dev`:
    "matrix", "portable" or None (today's composed path). See the module docstring."""
    if dtype not in ("f32", "f16") or not (1 <= embed <= MAX_EMBED and 1 <= embed_v <= MAX_EMBED):
        return None
    if batch > 65535:
        return None
    wanted = _setting()
    if wanted == "0":
        return None
    if wanted == "portable":
        return "portable"
    # Unset: the matrix kernels for f16 where the device has them (measured on the H200,
    # 2026-12-03, nanoGPT's 64x6x256x64 causal, forward + backward: matrix flash 0.67 ms, the f32
    # composed path on converted operands 0.79, torch fp32 0.63; the nanoGPT autocast step 21.3
    # ms against 23.3; docs/BENCHMARKS.md session 16); the portable ones only when asked for
    # (ANYGPU_FLASH=1 or =portable: 11.8 ms there).
    if dtype == "f16" and flash_sgmat.serves(embed, embed_v):
        limits = flash_sgmat.config(dev)
        if limits is not None and all(flash_sgmat.subgroups_for(k, embed, embed_v, *limits) for k in flash_sgmat.KINDS):
            return "matrix"
    return "portable" if wanted == "1" else None


# ---------------------------------------------------------------- portable kernels

def _storage(dtype: str) -> tuple[str, str]:
    return ("enable f16;\n" if dtype == "f16" else ""), dtype


def _row_vec(buf: str, base: str, cols: int, t: int) -> str:
    """vec4<f32> of elements 4t..4t+3 of the row at `base` (0 past `cols`)."""
    parts = [f"f32({buf}[{base} + {4 * t + e}u])" if 4 * t + e < cols else "0.0" for e in range(4)]
    return f"vec4<f32>({', '.join(parts)})"


def _row_store(buf: str, base: str, cols: int, t: int, value: str, dtype: str) -> list[str]:
    return [f"{buf}[{base} + {4 * t + e}u] = {dtype}({value}.{'xyzw'[e]});" for e in range(4) if 4 * t + e < cols]


def _dot(a: str, b: str, n4: int) -> str:
    return " + ".join(f"dot({a}{t}, {b}{t})" for t in range(n4))


def _mask_base(z: str) -> str:
    return f"({z} / P.m_inner) * P.m_so + ({z} % P.m_inner) * P.m_si"


def _head(dtype: str, inputs: list[str], outputs: list[tuple[str, str]]) -> list[str]:
    enable, t = _storage(dtype)
    lines = [enable + _PARAMS]
    for b, name in enumerate(inputs, start=1):
        ty = "f32" if name in ("M", "LSE", "LD") else t
        lines.append(f"@group(0) @binding({b}) var<storage, read> {name}: array<{ty}>;")
    for b, (name, ty) in enumerate(outputs, start=len(inputs) + 1):
        lines.append(f"@group(0) @binding({b}) var<storage, read_write> {name}: array<{ty}>;")
    lines.append(_HASH)   # with NEG (-FLT_MAX: Tint refuses an -inf literal) and EMPTY (an empty row's lse)
    return lines


def _portable_forward(dtype: str, d: int, dv: int, causal: bool, masked: bool, dropout: bool,
                      wg: int = 64, chunk: int = 8) -> str:
    d4, v4 = -(-d // 4), -(-dv // 4)
    inputs = ["Q", "K", "V"] + (["M"] if masked else [])
    L = _head(dtype, inputs, [("O", dtype), ("LSE", "f32")])
    L += [f"@compute @workgroup_size({wg})",
          "fn main(@builtin(workgroup_id) wg: vec3<u32>, @builtin(local_invocation_index) li: u32) {",
          f"  let i = wg.x * {wg}u + li;",
          "  let z = wg.y;",
          "  if (i >= P.length) { return; }",
          f"  let qb = (z * P.length + i) * {d}u;",
          f"  let kb = z * P.source * {d}u;",
          f"  let vb = z * P.source * {dv}u;"]
    L += [f"  let q{t} = {_row_vec('Q', 'qb', d, t)};" for t in range(d4)]
    L += [f"  var o{t} = vec4<f32>(0.0);" for t in range(v4)]
    L += ["  var m = NEG;", "  var l = 0.0;",
          "  let jend = " + ("min(P.source, i + 1u);" if causal else "P.source;")]
    if masked:
        L.append(f"  let mb = {_mask_base('z')} + i * P.m_rs;")
    L += [f"  var s: array<f32, {chunk}>;",
          f"  for (var j0 = 0u; j0 < jend; j0 += {chunk}u) {{",
          "    var mt = NEG;",
          f"    for (var c = 0u; c < {chunk}u; c++) {{",
          "      let r = min(j0 + c, jend - 1u);",
          f"      let kr = kb + r * {d}u;"]
    L += [f"      let k{t} = {_row_vec('K', 'kr', d, t)};" for t in range(d4)]
    score = "(" + _dot("q", "k", d4) + ") * P.scale" + (" + M[mb + r * P.m_cs]" if masked else "")
    L += [f"      s[c] = {score};",
          "      if (j0 + c < jend) { mt = max(mt, s[c]); }",
          "    }",
          "    let mn = max(m, mt);",
          "    let live = mn > NEG;",
          "    let mu = select(0.0, mn, live);",
          "    let alpha = select(1.0, exp(m - mn), live);",
          "    var ps = 0.0;"]
    L += [f"    o{t} *= alpha;" for t in range(v4)]
    L += [f"    for (var c = 0u; c < {chunk}u; c++) {{",
          "      let j = j0 + c;",
          "      let p = select(0.0, exp(s[c] - mu), j < jend && live);",
          "      ps += p;",
          "      let w = " + ("select(0.0, p * P.drop_scale, kept(z, i, j));" if dropout else "p;"),
          f"      let vr = vb + min(j, jend - 1u) * {dv}u;"]
    L += [f"      o{t} += w * {_row_vec('V', 'vr', dv, t)};" for t in range(v4)]
    L += ["    }", "    l = l * alpha + ps;"]
    L += ["    m = mn;", "  }",
          "  let inv = select(0.0, 1.0 / l, l > 0.0);",
          f"  let ob = (z * P.length + i) * {dv}u;"]
    for t in range(v4):
        L += ["  " + x for x in _row_store("O", "ob", dv, t, f"(o{t} * inv)", dtype)]
    L += ["  LSE[z * P.length + i] = select(EMPTY, m + log(l), l > 0.0);", "}"]
    return "\n".join(L) + "\n"


def _portable_prepare(dtype: str, dv: int, wg: int = 64) -> str:
    """LD[2 r] = lse[r], LD[2 r + 1] = rowsum(dO[r] * O[r]): the backward's per-row values."""
    v4 = -(-dv // 4)
    L = _head(dtype, ["O", "DO", "LSE"], [("LD", "f32")])
    L += [f"@compute @workgroup_size({wg})",
          "fn main(@builtin(workgroup_id) wg: vec3<u32>, @builtin(local_invocation_index) li: u32,",
          "        @builtin(num_workgroups) nwg: vec3<u32>) {",
          f"  let r = (wg.x + wg.y * nwg.x) * {wg}u + li;",
          "  if (r >= P.length) { return; }",
          f"  let b = r * {dv}u;",
          "  let d = " + " + ".join(f"dot({_row_vec('O', 'b', dv, t)}, {_row_vec('DO', 'b', dv, t)})" for t in range(v4)) + ";",
          "  LD[2u * r] = LSE[r];",
          "  LD[2u * r + 1u] = d;",
          "}"]
    return "\n".join(L) + "\n"


def _portable_dq(dtype: str, d: int, dv: int, causal: bool, masked: bool, dropout: bool, wg: int = 64) -> str:
    d4, v4 = -(-d // 4), -(-dv // 4)
    inputs = ["Q", "K", "V"] + (["M"] if masked else []) + ["DO", "LD"]
    L = _head(dtype, inputs, [("DQ", dtype)])
    L += [f"@compute @workgroup_size({wg})",
          "fn main(@builtin(workgroup_id) wg: vec3<u32>, @builtin(local_invocation_index) li: u32) {",
          f"  let i = wg.x * {wg}u + li;",
          "  let z = wg.y;",
          "  if (i >= P.length) { return; }",
          "  let row = z * P.length + i;",
          f"  let qb = row * {d}u;",
          f"  let ob = row * {dv}u;",
          f"  let kb = z * P.source * {d}u;",
          f"  let vb = z * P.source * {dv}u;",
          "  let lse = LD[2u * row];",
          "  let dvec = LD[2u * row + 1u];"]
    L += [f"  let q{t} = {_row_vec('Q', 'qb', d, t)};" for t in range(d4)]
    L += [f"  let g{t} = {_row_vec('DO', 'ob', dv, t)};" for t in range(v4)]
    L += [f"  var a{t} = vec4<f32>(0.0);" for t in range(d4)]
    L.append("  let jend = " + ("min(P.source, i + 1u);" if causal else "P.source;"))
    if masked:
        L.append(f"  let mb = {_mask_base('z')} + i * P.m_rs;")
    L += ["  for (var j = 0u; j < jend; j++) {",
          f"    let kr = kb + j * {d}u;",
          f"    let vr = vb + j * {dv}u;"]
    L += [f"    let k{t} = {_row_vec('K', 'kr', d, t)};" for t in range(d4)]
    s = f"({_dot('q', 'k', d4)}) * P.scale" + (" + M[mb + j * P.m_cs]" if masked else "")
    L += [f"    let p = exp({s} - lse);",
          "    var dp = " + " + ".join(f"dot(g{t}, {_row_vec('V', 'vr', dv, t)})" for t in range(v4)) + ";"]
    if dropout:
        L.append("    dp = select(0.0, dp * P.drop_scale, kept(z, i, j));")
    L.append("    let ds = p * (dp - dvec);")
    L += [f"    a{t} += ds * k{t};" for t in range(d4)]
    L.append("  }")
    for t in range(d4):
        L += ["  " + x for x in _row_store("DQ", "qb", d, t, f"(a{t} * P.scale)", dtype)]
    L.append("}")
    return "\n".join(L) + "\n"


def _portable_dkv(dtype: str, d: int, dv: int, causal: bool, masked: bool, dropout: bool, wg: int = 64) -> str:
    d4, v4 = -(-d // 4), -(-dv // 4)
    inputs = ["Q", "K", "V"] + (["M"] if masked else []) + ["DO", "LD"]
    L = _head(dtype, inputs, [("DK", dtype), ("DV", dtype)])
    L += [f"@compute @workgroup_size({wg})",
          "fn main(@builtin(workgroup_id) wg: vec3<u32>, @builtin(local_invocation_index) li: u32) {",
          f"  let j = wg.x * {wg}u + li;",
          "  let z = wg.y;",
          "  if (j >= P.source) { return; }",
          f"  let kb = (z * P.source + j) * {d}u;",
          f"  let vb = (z * P.source + j) * {dv}u;"]
    L += [f"  let k{t} = {_row_vec('K', 'kb', d, t)};" for t in range(d4)]
    L += [f"  let v{t} = {_row_vec('V', 'vb', dv, t)};" for t in range(v4)]
    L += [f"  var a{t} = vec4<f32>(0.0);" for t in range(d4)]
    L += [f"  var b{t} = vec4<f32>(0.0);" for t in range(v4)]
    if masked:
        L.append(f"  let mb = {_mask_base('z')} + j * P.m_cs;")
    L += ["  for (var i = " + ("j" if causal else "0u") + "; i < P.length; i++) {",
          "    let row = z * P.length + i;",
          f"    let qr = row * {d}u;",
          f"    let gr = row * {dv}u;"]
    L += [f"    let q{t} = {_row_vec('Q', 'qr', d, t)};" for t in range(d4)]
    L += [f"    let g{t} = {_row_vec('DO', 'gr', dv, t)};" for t in range(v4)]
    s = f"({_dot('q', 'k', d4)}) * P.scale" + (" + M[mb + i * P.m_rs]" if masked else "")
    L += [f"    let p = exp({s} - LD[2u * row]);",
          f"    var dp = {_dot('g', 'v', v4)};"]
    if dropout:
        L += ["    let keep = kept(z, i, j);",
              "    let w = select(0.0, p * P.drop_scale, keep);",
              "    dp = select(0.0, dp * P.drop_scale, keep);"]
    else:
        L.append("    let w = p;")
    L.append("    let ds = p * (dp - LD[2u * row + 1u]);")
    L += [f"    b{t} += w * g{t};" for t in range(v4)]
    L += [f"    a{t} += ds * q{t};" for t in range(d4)]
    L.append("  }")
    for t in range(d4):
        L += ["  " + x for x in _row_store("DK", "kb", d, t, f"(a{t} * P.scale)", dtype)]
    for t in range(v4):
        L += ["  " + x for x in _row_store("DV", "vb", dv, t, f"b{t}", dtype)]
    L.append("}")
    return "\n".join(L) + "\n"


# ---------------------------------------------------------------- ops

class _Call(NamedTuple):
    batch: int
    length: int
    source: int
    embed: int
    embed_v: int
    dtype: str
    causal: bool
    masked: bool
    dropout: bool
    params: tuple
    plain: bool        # q, k, v and out contiguous (else through Rows: the matrix kernels only)


def _check_rows(op: str, name: str, r: Rows, size: int, batch: int, n: int, cols: int) -> None:
    if r.inner < 1 or min(r) < 0 or any(x % 8 for x in r[1:]) or cols % 8:
        raise ValueError(f"{op}: {name}'s rows must be whole 16-byte units (strides and offset multiples of 8, "
                         f"inner >= 1), got {tuple(r)}")
    last = r.offset + ((batch - 1) // r.inner) * r.outer_stride + ((batch - 1) % r.inner) * r.inner_stride \
        + (n - 1) * r.row_stride + cols
    if last > size:
        raise ValueError(f"{op}: {name} of {size} elements is too small for rows {tuple(r)}")


def _check(op: str, q, k, v, batch, length, source, embed, embed_v, scale, causal, mask, strides,
           dropout_p, seed, rows=None, out_rows=None) -> _Call:
    check_positive(op, batch=batch, length=length, source=source, embed=embed, embed_v=embed_v)
    plain = (Rows.contiguous(length, embed), Rows.contiguous(source, embed), Rows.contiguous(source, embed_v))
    rows = plain if rows is None else tuple(Rows(*r) for r in rows)
    for name, buf, r, n, cols, size in (("q", q, rows[0], length, embed, "batch*length*embed"),
                                        ("k", k, rows[1], source, embed, "batch*source*embed"),
                                        ("v", v, rows[2], source, embed_v, "batch*source*embed_v")):
        if rows == plain:
            check_buffer(op, name, buf, batch * n * cols, size)
            continue
        check_buffer(op, name, buf)
        _check_rows(op, name, r, buf.len, batch, n, cols)
    out_plain = Rows.contiguous(length, embed_v)
    out_rows = out_plain if out_rows is None else Rows(*out_rows)
    if out_rows != out_plain:
        _check_rows(op, "out", out_rows, batch * length * embed_v, batch, length, embed_v)
        if not disjoint([(out_rows, batch, length, embed_v)]):
            raise ValueError(f"{op}: out_rows {tuple(out_rows)} place two elements of out at one position")
    dtype = q.dtype
    if dtype not in ("f32", "f16") or k.dtype != dtype or v.dtype != dtype:
        raise ValueError(f"{op}: q, k, v must share f32 or f16 storage, got {q.dtype}, {k.dtype}, {v.dtype}")
    if embed > MAX_EMBED or embed_v > MAX_EMBED:
        raise ValueError(f"{op}: head dims up to {MAX_EMBED} are served, got {embed} and {embed_v}")
    if batch > 65535:
        raise ValueError(f"{op}: at most 65535 batch entries (one grid dimension), got {batch}")
    if not 0.0 <= dropout_p < 1.0:
        raise ValueError(f"{op}: dropout_p must be in [0, 1), got {dropout_p}")
    if dropout_p > 0.0 and seed is None:
        raise ValueError(f"{op}: dropout_p > 0 needs a seed")
    st = MaskStrides()
    if mask is not None:
        check_buffer(op, "mask", mask)
        if mask.dtype != "f32":
            raise ValueError(f"{op}: the mask must be additive f32, got {mask.dtype}")
        st = MaskStrides(*strides) if strides is not None else MaskStrides(1, length * source, 0, source, 1)
        if st.inner < 1:
            raise ValueError(f"{op}: mask strides need inner >= 1, got {st}")
        last = ((batch - 1) // st.inner) * st.outer_stride + ((batch - 1) % st.inner) * st.inner_stride \
            + (length - 1) * st.row_stride + (source - 1) * st.col_stride
        if last >= mask.len:
            raise ValueError(f"{op}: mask of {mask.len} elements is too small for strides {tuple(st)}")
    scale = float(scale) if scale is not None else embed ** -0.5
    seed_lo = seed_hi = threshold = 0
    drop_scale = 1.0
    if dropout_p > 0.0:
        seed = int(seed)
        seed_lo, seed_hi = seed & 0xFFFFFFFF, (seed >> 32) & 0xFFFFFFFF
        threshold = min(int(dropout_p * 2 ** 32), 2 ** 32 - 1)
        drop_scale = 1.0 / (1.0 - dropout_p)
    params = (length, source, scale, st.inner, st.outer_stride, st.inner_stride, st.row_stride, st.col_stride,
              seed_lo, seed_hi, threshold, drop_scale) + tuple(
        x if i == 0 else x // 8 for r in (*rows, out_rows) for i, x in enumerate(r))   # (16-byte units)
    return _Call(batch, length, source, embed, embed_v, dtype, bool(causal), mask is not None,
                 dropout_p > 0.0, params, rows == plain and out_rows == out_plain)


def _pick(dev, c: _Call, kind: str | None) -> str:
    if kind is None:
        kind = variant(dev, c.dtype, c.embed, c.embed_v, c.batch) or "portable"
    if kind not in ("portable", "matrix"):
        raise ValueError(f"flash_attention: variant must be 'portable' or 'matrix', got {kind!r}")
    if kind == "matrix" and c.dtype != "f16":
        raise ValueError("flash_attention: the matrix variant takes f16 q, k, v")
    if kind == "portable" and not c.plain:
        raise ValueError("flash_attention: the portable variant takes contiguous q, k, v and out (rows=None, "
                         "out_rows=None)")
    return kind


def flash_attention(dev, q, k, v, batch: int, length: int, source: int, embed: int, embed_v: int,
                    scale: float | None = None, causal: bool = False, mask=None, mask_strides=None,
                    dropout_p: float = 0.0, seed: int | None = None, kind: str | None = None, rows=None,
                    out_rows=None):
    """softmax(scale q k^T + mask) v without the scores in memory: q [batch, length, embed],
    k [batch, source, embed], v [batch, source, embed_v] (f32 or f16) -> (out [batch, length,
    embed_v] of q's dtype, lse [batch, length] f32). scale defaults to embed**-0.5; mask: an
    additive f32 Buffer read through mask_strides (MaskStrides; default: [batch, length,
    source] contiguous); dropout_p with seed drops probabilities as ops/random.dropout would
    on the [batch, length, source] probabilities; kind: "portable", "matrix" or None (the
    routed choice, see `variant`); rows: q's, k's and v's Rows where they are strided views
    (the matrix variant; default contiguous); out_rows: where out's rows go in its
    batch*length*embed_v elements (the matrix variant; e.g. [B, T, H, D] order for q of
    [B, H, T, D] taken from a [B, T, H, D] tensor, as torch's flash kernels keep q's order)."""
    op = "flash_attention"
    c = _check(op, q, k, v, batch, length, source, embed, embed_v, scale, causal, mask, mask_strides,
               dropout_p, seed, rows, out_rows)
    kind = _pick(dev, c, kind)
    out = dev.empty(batch * length * embed_v, c.dtype)
    lse = dev.empty(batch * length, "f32")
    inputs = [q, k, v] + ([mask] if mask is not None else [])
    if kind == "matrix":
        flash_sgmat.forward(dev, c, inputs, out, lse)
        return out, lse
    code = _portable_forward(c.dtype, embed, embed_v, c.causal, c.masked, c.dropout)
    kernel = dev.kernel(f"flash_fwd[{c.dtype},{embed},{embed_v}]", code, len(inputs), 2, PARAM_FORMAT)
    dev.launch(kernel, inputs, [out, lse], c.params, (-(-length // 64), batch, 1))
    return out, lse


def flash_attention_backward(dev, grad_out, q, k, v, out, lse, batch: int, length: int, source: int, embed: int,
                             embed_v: int, scale: float | None = None, causal: bool = False, mask=None,
                             mask_strides=None, dropout_p: float = 0.0, seed: int | None = None,
                             kind: str | None = None, rows=None, out_rows=None, into=None):
    """Gradients (dq, dk, dv) of flash_attention from its inputs, its out and lse, and the
    gradient of out (grad_out, [batch, length, embed_v] contiguous, converted to q's dtype).
    The same arguments as the forward (out read through out_rows); the probabilities are
    recomputed from lse. into (the matrix variant): a Buffer of q's dtype that takes the three
    gradients where q, k and v lie in their buffers (rows; they must be disjoint, `disjoint`;
    what they do not cover is left as it is); then (into, into, into) is returned."""
    op = "flash_attention_backward"
    c = _check(op, q, k, v, batch, length, source, embed, embed_v, scale, causal, mask, mask_strides,
               dropout_p, seed, rows, out_rows)
    check_buffer(op, "grad_out", grad_out, batch * length * embed_v, "batch*length*embed_v")
    check_buffer(op, "out", out, batch * length * embed_v, "batch*length*embed_v")
    check_buffer(op, "lse", lse, batch * length, "batch*length")
    kind = _pick(dev, c, kind)
    if grad_out.dtype != c.dtype:
        grad_out = dev.cast(grad_out, c.dtype)
    if out.dtype != c.dtype:
        raise ValueError(f"{op}: out must have q's dtype {c.dtype}, got {out.dtype}")
    if into is not None:
        if kind != "matrix":
            raise ValueError(f"{op}: into= is served by the matrix variant only")
        check_buffer(op, "into", into)
        if into.dtype != c.dtype:
            raise ValueError(f"{op}: into must have q's dtype {c.dtype}, got {into.dtype}")
        r = rows or (Rows.contiguous(length, embed), Rows.contiguous(source, embed), Rows.contiguous(source, embed_v))
        views = [(r[0], batch, length, embed), (r[1], batch, source, embed), (r[2], batch, source, embed_v)]
        for name, (view, *shape) in zip("qkv", views):
            _check_rows(op, f"into's {name}", Rows(*view), into.len, *shape)
        if not disjoint(views):
            raise ValueError(f"{op}: into= needs q, k and v at disjoint positions, got rows {tuple(map(tuple, r))}")
        flash_sgmat.backward(dev, c, [q, k, v] + ([mask] if mask is not None else []), grad_out, out, lse, into,
                             None, None, into=True)
        return into, into, into
    dq = dev.empty(batch * length * embed, c.dtype)
    dk = dev.empty(batch * source * embed, c.dtype)
    dv = dev.empty(batch * source * embed_v, c.dtype)
    if kind == "matrix":
        flash_sgmat.backward(dev, c, [q, k, v] + ([mask] if mask is not None else []), grad_out, out, lse, dq, dk, dv)
        return dq, dk, dv
    rows = batch * length
    ld = dev.empty(2 * rows, "f32")
    prep = dev.kernel(f"flash_prep[{c.dtype},{embed_v}]", _portable_prepare(c.dtype, embed_v), 3, 1, PARAM_FORMAT)
    dev.launch(prep, [out, grad_out, lse], [ld], (rows,) + c.params[1:], dev.grid(-(-rows // 64)))
    inputs = [q, k, v] + ([mask] if mask is not None else []) + [grad_out, ld]
    args = (c.dtype, embed, embed_v, c.causal, c.masked, c.dropout)
    kq = dev.kernel(f"flash_dq[{c.dtype},{embed},{embed_v}]", _portable_dq(*args), len(inputs), 1, PARAM_FORMAT)
    dev.launch(kq, inputs, [dq], c.params, (-(-length // 64), batch, 1))
    kkv = dev.kernel(f"flash_dkv[{c.dtype},{embed},{embed_v}]", _portable_dkv(*args), len(inputs), 2, PARAM_FORMAT)
    dev.launch(kkv, inputs, [dk, dv], c.params, (-(-source // 64), batch, 1))
    return dq, dk, dv
