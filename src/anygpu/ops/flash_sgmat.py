"""Flash attention on matrix units (ops/flash_attention.py's algorithm; Dawn's
chromium_experimental_subgroup_matrix, 16x16x16 f16 -> f32, subgroups of 32).

A workgroup has `ns` subgroups; each owns 16 rows (queries in the forward and dQ, keys in
dK/dV) and tiles of the other side advance 16*ns rows at a time through workgroup memory
(f16, rows padded by 8 halves). Products on subgroup matrices: S = Q K^T (K^T read
col_major from the staged rows), O += P V, and in the backward dP = dO V^T, dQ += dS K,
dV += P^T dO, dK += dS^T Q. The elementwise steps run on the subgroup's lanes in f32 from
a per-subgroup f32 scratch the result matrices are stored to: lane L serves row L % 16 and
half L / 16 of the tile's columns; the two halves of a row meet through
subgroupShuffleXor(x, 16). In the forward each lane keeps its half of its row of O in
registers (rescaled by the online softmax's alpha, the tile's P V added from the scratch);
P and dS are rounded to f16 for the products (what the composed f16 path does too).

This module imports nothing of anygpu at load, so benchmarks/attention_flash.py --null can
compile its kernels with Dawn's compiler on the Null backend (no GPU)."""

from __future__ import annotations

import functools
import os
import warnings
from typing import NamedTuple

PARAM_FORMAT = "IIfIIIIIIIIf"
PARAMS_WGSL = """struct Params {
    length: u32, source: u32, scale: f32, m_inner: u32,
    m_so: u32, m_si: u32, m_rs: u32, m_cs: u32,
    seed_lo: u32, seed_hi: u32, threshold: u32, drop_scale: f32,
}
@group(0) @binding(0) var<uniform> P: Params;"""
HASH_WGSL = """fn pcg_hash(v: u32) -> u32 {
    let state = v * 747796405u + 2891336453u;
    let word = ((state >> ((state >> 28u) + 4u)) ^ state) * 277803737u;
    return (word >> 22u) ^ word;
}
fn kept(z: u32, i: u32, j: u32) -> bool {   // ops/random.dropout's draw for score (z, i, j)
    let e = (z * P.length + i) * P.source + j;
    return pcg_hash(pcg_hash(e ^ P.seed_lo) + P.seed_hi) >= P.threshold;
}
const NEG: f32 = -3.40282346e38;
const EMPTY: f32 = 3.0e38;"""
PAD = 8
KINDS = ("forward", "dq", "dkv")


class Shape(NamedTuple):
    """What a generated kernel depends on: head dims, subgroups per workgroup and flags."""

    d: int
    dv: int
    ns: int
    causal: bool
    masked: bool
    dropout: bool

    @property
    def rows(self) -> int:
        return 16 * self.ns


def workgroup_bytes(kind: str, d: int, dv: int, ns: int) -> int:
    bc = 16 * ns
    tiles = 2 * bc * (d + PAD) + 2 * bc * (dv + PAD)
    width = {"forward": max(bc, dv), "dq": max(2 * bc, d), "dkv": max(2 * bc, d, dv)}[kind]
    probs = (2 if kind == "dkv" else 1) * 2 * ns * 16 * (bc + PAD)
    return tiles + 4 * ns * 16 * width + probs


def subgroups_for(kind: str, d: int, dv: int, max_bytes: int = 49152, max_threads: int = 1024) -> int:
    """The most subgroups (4, 2 or 1) whose workgroup fits the limits; 0 if none."""
    return next((ns for ns in (4, 2, 1) if 32 * ns <= max_threads and workgroup_bytes(kind, d, dv, ns) <= max_bytes),
                0)


def serves(d: int, dv: int) -> bool:
    return d % 16 == 0 and dv % 16 == 0 and 16 <= d <= 128 and 16 <= dv <= 128


def _head(s: Shape, kind: str, inputs: list[str], outputs: list[str]) -> list[str]:
    bc = s.rows
    L = ["diagnostic(off, chromium.subgroup_matrix_uniformity);", "diagnostic(off, subgroup_uniformity);",
         "enable f16;", "enable subgroups;", "enable chromium_experimental_subgroup_matrix;", PARAMS_WGSL]
    for b, name in enumerate(inputs, start=1):
        ty = "f32" if name in ("M", "LD") else "f16"
        L.append(f"@group(0) @binding({b}) var<storage, read> {name}: array<{ty}>;")
    for b, name in enumerate(outputs, start=len(inputs) + 1):
        ty = "f32" if name == "LSE" else "f16"
        L.append(f"@group(0) @binding({b}) var<storage, read_write> {name}: array<{ty}>;")
    width = {"forward": max(bc, s.dv), "dq": max(2 * bc, s.d), "dkv": max(2 * bc, s.d, s.dv)}[kind]
    L += ["alias LM = subgroup_matrix_left<f16, 16, 16>;",
          "alias RM = subgroup_matrix_right<f16, 16, 16>;",
          "alias AM = subgroup_matrix_result<f32, 16, 16>;",
          f"const SW: u32 = {width}u;",
          f"const PP: u32 = {bc + PAD}u;",
          f"const PA: u32 = {s.d + PAD}u;",
          f"const PB: u32 = {s.dv + PAD}u;",
          f"var<workgroup> tA: array<f16, {bc * (s.d + PAD)}>;",     # K or Q rows (d wide)
          f"var<workgroup> tB: array<f16, {bc * (s.dv + PAD)}>;",    # V or dO rows (dv wide)
          f"var<workgroup> sS: array<f32, {s.ns * 16 * width}>;",
          f"var<workgroup> sP: array<f16, {s.ns * 16 * (bc + PAD)}>;"]
    if kind == "dkv":
        L.append(f"var<workgroup> sD: array<f16, {s.ns * 16 * (bc + PAD)}>;")
    L += [HASH_WGSL,
          f"@compute @workgroup_size({32 * s.ns})",
          "fn main(@builtin(workgroup_id) wg: vec3<u32>, @builtin(local_invocation_index) li: u32,",
          "        @builtin(subgroup_id) sgid: u32, @builtin(subgroup_invocation_id) lane: u32) {",
          "  let z = wg.y;",
          f"  let base0 = wg.x * {bc}u;",
          "  let r = lane % 16u;",
          "  let h = lane / 16u;",
          "  let sbase = sgid * 16u * SW;",
          "  let pbase = sgid * 16u * PP;"]
    return L


def _stage(s: Shape, dst: str, src: str, base: str, row0: str, limit: str, cols: int, pitch: str) -> list[str]:
    """Rows row0.. of the [*, cols] matrix at `base` into workgroup array dst (0 from `limit`)."""
    n = s.rows * cols
    return [f"  for (var e = li; e < {n}u; e += {32 * s.ns}u) {{",
            f"    let g = {row0} + e / {cols}u;",
            "    var x = 0.0h;",
            f"    if (g < {limit}) {{ x = {src}[{base} + g * {cols}u + e % {cols}u]; }}",
            f"    {dst}[(e / {cols}u) * {pitch} + e % {cols}u] = x;",
            "  }"]


def _lefts(name: str, arr: str, count: int, row_off: str, pitch: str) -> list[str]:
    return [f"  let {name}{kk} = subgroupMatrixLoad<LM, row_major>(&{arr}, {row_off} + {16 * kk}u, {pitch});"
            for kk in range(count)]


def _store_rows(s: Shape, mats: str, count: int, out: str, row: str, limit: str, cols: int, factor: str) -> list[str]:
    """The subgroup's result matrices mats0.. (16 x 16 * count) through the scratch into rows
    of `out` ([*, cols], this lane's row `row`, its half of the columns)."""
    L = [f"  subgroupMatrixStore<row_major>(&sS, sbase + {16 * m}u, {mats}{m}, SW);" for m in range(count)]
    L += ["  workgroupBarrier();",
          f"  if ({row} < {limit}) {{",
          f"    for (var c = 0u; c < {cols // 2}u; c++) {{",
          f"      let cc = h * {cols // 2}u + c;",
          f"      {out}[{row} * {cols}u + cc] = f16({factor}sS[sbase + r * SW + cc]);",
          "    }",
          "  }",
          "  workgroupBarrier();"]
    return L


def _generate_forward(s: Shape) -> str:
    bc, d4, half = s.rows, s.d // 16, s.rows // 2
    inputs = ["Q", "K", "V"] + (["M"] if s.masked else [])
    L = _head(s, "forward", inputs, ["O", "LSE"])
    L += ["  let i = base0 + sgid * 16u + r;",
          "  let ic = min(i, P.length - 1u);",
          f"  let qb = z * P.length * {s.d}u;",
          f"  let kb = z * P.source * {s.d}u;",
          f"  let vb = z * P.source * {s.dv}u;"]
    L += _stage(s, "tA", "Q", "qb", "base0", "P.length", s.d, "PA")
    L += ["  workgroupBarrier();"] + _lefts("q", "tA", d4, "sgid * 16u * PA", "PA")
    L += [f"  var o{t} = vec4<f32>(0.0);" for t in range(s.dv // 8)]
    L += ["  var m = NEG;", "  var lh = 0.0;",
          "  let jend = " + ("min(P.source, i + 1u);" if s.causal else "P.source;"),
          "  let jend_wg = " + (f"min(P.source, base0 + {bc}u);" if s.causal else "P.source;"),
          f"  let tiles = (jend_wg + {bc - 1}u) / {bc}u;"]
    if s.masked:
        L.append("  let mb = (z / P.m_inner) * P.m_so + (z % P.m_inner) * P.m_si + ic * P.m_rs;")
    L += ["  for (var t = 0u; t < tiles; t++) {",
          f"    let j0 = t * {bc}u;",
          "    workgroupBarrier();"]
    L += ["  " + x for x in _stage(s, "tA", "K", "kb", "j0", "P.source", s.d, "PA")]
    L += ["  " + x for x in _stage(s, "tB", "V", "vb", "j0", "P.source", s.dv, "PB")]
    L.append("    workgroupBarrier();")
    for jb in range(bc // 16):
        L.append(f"    var s{jb} = AM();")
        for kk in range(d4):
            L.append(f"    s{jb} = subgroupMatrixMultiplyAccumulate(q{kk}, subgroupMatrixLoad<RM, col_major>(&tA, "
                     f"{jb * 16}u * PA + {16 * kk}u, PA), s{jb});")
        L.append(f"    subgroupMatrixStore<row_major>(&sS, sbase + {16 * jb}u, s{jb}, SW);")
    L += ["    workgroupBarrier();",
          "    var mt = NEG;",
          f"    for (var c = 0u; c < {half}u; c++) {{",
          f"      let cc = h * {half}u + c;",
          "      let j = j0 + cc;",
          "      let at = sbase + r * SW + cc;",
          "      let sc = sS[at] * P.scale" + (" + M[mb + min(j, P.source - 1u) * P.m_cs];" if s.masked else ";"),
          "      sS[at] = sc;",
          "      if (j < jend) { mt = max(mt, sc); }",
          "    }",
          "    mt = max(mt, subgroupShuffleXor(mt, 16u));",
          "    let mn = max(m, mt);",
          "    let live = mn > NEG;",
          "    let mu = select(0.0, mn, live);",
          "    let alpha = select(1.0, exp(m - mn), live);",
          "    var ps = 0.0;",
          f"    for (var c = 0u; c < {half}u; c++) {{",
          f"      let cc = h * {half}u + c;",
          "      let j = j0 + cc;",
          "      let p = select(0.0, exp(sS[sbase + r * SW + cc] - mu), j < jend && live);",
          "      ps += p;",
          "      let w = " + ("select(0.0, p * P.drop_scale, kept(z, i, j));" if s.dropout else "p;"),
          "      sP[pbase + r * PP + cc] = f16(w);",
          "    }",
          "    lh = lh * alpha + ps;",
          "    m = mn;"]
    L += [f"    o{t} *= alpha;" for t in range(s.dv // 8)]
    L.append("    workgroupBarrier();")
    L += ["  " + x for x in _lefts("p", "sP", bc // 16, "pbase", "PP")]
    for db in range(s.dv // 16):
        L.append(f"    var a{db} = AM();")
        for kk in range(bc // 16):
            L.append(f"    a{db} = subgroupMatrixMultiplyAccumulate(p{kk}, subgroupMatrixLoad<RM, row_major>(&tB, "
                     f"{16 * kk}u * PB + {16 * db}u, PB), a{db});")
        L.append(f"    subgroupMatrixStore<row_major>(&sS, sbase + {16 * db}u, a{db}, SW);")
    L.append("    workgroupBarrier();")
    for t in range(s.dv // 8):
        at = f"sbase + r * SW + h * {s.dv // 2}u + {4 * t}u"
        L.append(f"    o{t} += vec4<f32>(sS[{at}], sS[{at} + 1u], sS[{at} + 2u], sS[{at} + 3u]);")
    L += ["  }",
          "  let l = lh + subgroupShuffleXor(lh, 16u);",
          "  if (i < P.length) {",
          "    let inv = select(0.0, 1.0 / l, l > 0.0);",
          f"    let ob = (z * P.length + i) * {s.dv}u + h * {s.dv // 2}u;"]
    for t in range(s.dv // 8):
        L += [f"    O[ob + {4 * t + e}u] = f16(o{t}.{'xyzw'[e]} * inv);" for e in range(4)]
    L += ["    if (h == 0u) { LSE[z * P.length + i] = select(EMPTY, m + log(l), l > 0.0); }",
          "  }",
          "}"]
    return "\n".join(L) + "\n"


def _generate_dq(s: Shape) -> str:
    bc, d4, v4, half = s.rows, s.d // 16, s.dv // 16, s.rows // 2
    inputs = ["Q", "K", "V"] + (["M"] if s.masked else []) + ["DO", "LD"]
    L = _head(s, "dq", inputs, ["DQ"])
    L += ["  let i = base0 + sgid * 16u + r;",
          "  let ic = min(i, P.length - 1u);",
          "  let row = z * P.length + ic;",
          "  let lse = LD[2u * row];",
          "  let dvec = LD[2u * row + 1u];",
          f"  let qb = z * P.length * {s.d}u;",
          f"  let gb = z * P.length * {s.dv}u;",
          f"  let kb = z * P.source * {s.d}u;",
          f"  let vb = z * P.source * {s.dv}u;"]
    L += _stage(s, "tA", "Q", "qb", "base0", "P.length", s.d, "PA")
    L += _stage(s, "tB", "DO", "gb", "base0", "P.length", s.dv, "PB")
    L += ["  workgroupBarrier();"] + _lefts("q", "tA", d4, "sgid * 16u * PA", "PA")
    L += _lefts("g", "tB", v4, "sgid * 16u * PB", "PB")
    L += [f"  var dq{db} = AM();" for db in range(d4)]
    L += ["  let jend = " + ("min(P.source, i + 1u);" if s.causal else "P.source;"),
          "  let jend_wg = " + (f"min(P.source, base0 + {bc}u);" if s.causal else "P.source;"),
          f"  let tiles = (jend_wg + {bc - 1}u) / {bc}u;"]
    if s.masked:
        L.append("  let mb = (z / P.m_inner) * P.m_so + (z % P.m_inner) * P.m_si + ic * P.m_rs;")
    L += ["  for (var t = 0u; t < tiles; t++) {",
          f"    let j0 = t * {bc}u;",
          "    workgroupBarrier();"]
    L += ["  " + x for x in _stage(s, "tA", "K", "kb", "j0", "P.source", s.d, "PA")]
    L += ["  " + x for x in _stage(s, "tB", "V", "vb", "j0", "P.source", s.dv, "PB")]
    L.append("    workgroupBarrier();")
    for jb in range(bc // 16):
        L.append(f"    var s{jb} = AM();")
        for kk in range(d4):
            L.append(f"    s{jb} = subgroupMatrixMultiplyAccumulate(q{kk}, subgroupMatrixLoad<RM, col_major>(&tA, "
                     f"{jb * 16}u * PA + {16 * kk}u, PA), s{jb});")
        L.append(f"    subgroupMatrixStore<row_major>(&sS, sbase + {16 * jb}u, s{jb}, SW);")
        L.append(f"    var e{jb} = AM();")
        for kk in range(v4):
            L.append(f"    e{jb} = subgroupMatrixMultiplyAccumulate(g{kk}, subgroupMatrixLoad<RM, col_major>(&tB, "
                     f"{jb * 16}u * PB + {16 * kk}u, PB), e{jb});")
        L.append(f"    subgroupMatrixStore<row_major>(&sS, sbase + {bc + 16 * jb}u, e{jb}, SW);")
    L += ["    workgroupBarrier();",
          f"    for (var c = 0u; c < {half}u; c++) {{",
          f"      let cc = h * {half}u + c;",
          "      let j = j0 + cc;",
          "      let at = sbase + r * SW + cc;",
          "      let sc = sS[at] * P.scale" + (" + M[mb + min(j, P.source - 1u) * P.m_cs];" if s.masked else ";"),
          "      let p = select(0.0, exp(sc - lse), j < jend);",
          f"      var dp = sS[at + {bc}u];"]
    if s.dropout:
        L.append("      dp = select(0.0, dp * P.drop_scale, kept(z, i, j));")
    L += ["      sP[pbase + r * PP + cc] = f16(p * (dp - dvec));",
          "    }",
          "    workgroupBarrier();"]
    L += ["  " + x for x in _lefts("ds", "sP", bc // 16, "pbase", "PP")]
    for db in range(d4):
        for kk in range(bc // 16):
            L.append(f"    dq{db} = subgroupMatrixMultiplyAccumulate(ds{kk}, subgroupMatrixLoad<RM, row_major>(&tA, "
                     f"{16 * kk}u * PA + {16 * db}u, PA), dq{db});")
    L.append("  }")
    L += _store_rows(s, "dq", d4, "DQ", "(z * P.length + i)", "P.length * (z + 1u)", s.d, "P.scale * ")
    L.append("}")
    return "\n".join(L) + "\n"


def _generate_dkv(s: Shape) -> str:
    bc, d4, v4, half = s.rows, s.d // 16, s.dv // 16, s.rows // 2
    inputs = ["Q", "K", "V"] + (["M"] if s.masked else []) + ["DO", "LD"]
    L = _head(s, "dkv", inputs, ["DK", "DV"])
    L += ["  let j = base0 + sgid * 16u + r;",
          "  let jc = min(j, P.source - 1u);",
          f"  let qb = z * P.length * {s.d}u;",
          f"  let gb = z * P.length * {s.dv}u;",
          f"  let kb = z * P.source * {s.d}u;",
          f"  let vb = z * P.source * {s.dv}u;"]
    L += _stage(s, "tA", "K", "kb", "base0", "P.source", s.d, "PA")
    L += _stage(s, "tB", "V", "vb", "base0", "P.source", s.dv, "PB")
    L += ["  workgroupBarrier();"] + _lefts("k", "tA", d4, "sgid * 16u * PA", "PA")
    L += _lefts("v", "tB", v4, "sgid * 16u * PB", "PB")
    L += [f"  var dk{db} = AM();" for db in range(d4)]
    L += [f"  var dv{db} = AM();" for db in range(v4)]
    L += ["  let first = " + ("wg.x;" if s.causal else "0u;"),
          f"  let tiles = (P.length + {bc - 1}u) / {bc}u;"]
    if s.masked:
        L.append("  let mb = (z / P.m_inner) * P.m_so + (z % P.m_inner) * P.m_si + jc * P.m_cs;")
    L += ["  for (var t = first; t < tiles; t++) {",
          f"    let i0 = t * {bc}u;",
          "    workgroupBarrier();"]
    L += ["  " + x for x in _stage(s, "tA", "Q", "qb", "i0", "P.length", s.d, "PA")]
    L += ["  " + x for x in _stage(s, "tB", "DO", "gb", "i0", "P.length", s.dv, "PB")]
    L.append("    workgroupBarrier();")
    for ib in range(bc // 16):
        L.append(f"    var s{ib} = AM();")
        for kk in range(d4):
            L.append(f"    s{ib} = subgroupMatrixMultiplyAccumulate(k{kk}, subgroupMatrixLoad<RM, col_major>(&tA, "
                     f"{ib * 16}u * PA + {16 * kk}u, PA), s{ib});")
        L.append(f"    subgroupMatrixStore<row_major>(&sS, sbase + {16 * ib}u, s{ib}, SW);")
        L.append(f"    var e{ib} = AM();")
        for kk in range(v4):
            L.append(f"    e{ib} = subgroupMatrixMultiplyAccumulate(v{kk}, subgroupMatrixLoad<RM, col_major>(&tB, "
                     f"{ib * 16}u * PB + {16 * kk}u, PB), e{ib});")
        L.append(f"    subgroupMatrixStore<row_major>(&sS, sbase + {bc + 16 * ib}u, e{ib}, SW);")
    ok = "i < P.length && i >= j" if s.causal else "i < P.length"
    L += ["    workgroupBarrier();",
          f"    for (var c = 0u; c < {half}u; c++) {{",
          f"      let cc = h * {half}u + c;",
          "      let i = i0 + cc;",
          "      let row = z * P.length + min(i, P.length - 1u);",
          "      let at = sbase + r * SW + cc;",
          "      let sc = sS[at] * P.scale" + (" + M[mb + min(i, P.length - 1u) * P.m_rs];" if s.masked else ";"),
          f"      let p = select(0.0, exp(sc - LD[2u * row]), {ok});",
          f"      var dp = sS[at + {bc}u];",
          "      var w = p;"]
    if s.dropout:
        L += ["      let keep = kept(z, i, j);",
              "      w = select(0.0, p * P.drop_scale, keep);",
              "      dp = select(0.0, dp * P.drop_scale, keep);"]
    L += ["      sP[pbase + r * PP + cc] = f16(w);",
          "      sD[pbase + r * PP + cc] = f16(p * (dp - LD[2u * row + 1u]));",
          "    }",
          "    workgroupBarrier();"]
    L += ["  " + x for x in _lefts("pt", "sP", bc // 16, "pbase", "PP")]
    L += ["  " + x for x in _lefts("dt", "sD", bc // 16, "pbase", "PP")]
    for db in range(v4):
        for kk in range(bc // 16):
            L.append(f"    dv{db} = subgroupMatrixMultiplyAccumulate(pt{kk}, subgroupMatrixLoad<RM, row_major>(&tB, "
                     f"{16 * kk}u * PB + {16 * db}u, PB), dv{db});")
    for db in range(d4):
        for kk in range(bc // 16):
            L.append(f"    dk{db} = subgroupMatrixMultiplyAccumulate(dt{kk}, subgroupMatrixLoad<RM, row_major>(&tA, "
                     f"{16 * kk}u * PA + {16 * db}u, PA), dk{db});")
    L.append("  }")
    L += _store_rows(s, "dk", d4, "DK", "(z * P.source + j)", "P.source * (z + 1u)", s.d, "P.scale * ")
    L += _store_rows(s, "dv", v4, "DV", "(z * P.source + j)", "P.source * (z + 1u)", s.dv, "")
    L.append("}")
    return "\n".join(L) + "\n"


@functools.lru_cache(maxsize=None)
def generate(kind: str, s: Shape) -> str:
    """The WGSL of kernel `kind` ("forward", "dq", "dkv") for `s`."""
    return {"forward": _generate_forward, "dq": _generate_dq, "dkv": _generate_dkv}[kind](s)


# ---------------------------------------------------------------- device side

def config(dev) -> tuple[int, int] | None:
    """(max workgroup bytes, max threads) where `dev` runs this family: f16 x f16 -> f32
    16x16x16 subgroup matrices with subgroups of 32, checked by the runtime; None elsewhere,
    with ANYGPU_MATRIX_UNITS=0, or after `forget`."""
    if getattr(dev, "_flash_sgmat_off", False):
        return None
    if os.environ.get("ANYGPU_MATRIX_UNITS", "1").strip().lower() in ("0", "false", "off", "no"):
        return None
    from .sgmat import f16_configs
    configs, sg = f16_configs(dev)
    if sg != 32 or not any((int(c["M"]), int(c["N"]), int(c["K"])) == (16, 16, 16) for c in configs):
        return None
    limits = getattr(dev, "limits", {}) or {}
    return (int(limits.get("max-compute-workgroup-storage-size", 16384)),
            int(limits.get("max-compute-invocations-per-workgroup", 256)))


def forget(dev, reason: str) -> None:
    """Stop using this family on `dev` (a kernel failed): attention goes back to the composed path."""
    dev._flash_sgmat_off = True
    warnings.warn(f"anygpu: flash attention on matrix units disabled on this device: {reason}", RuntimeWarning,
                  stacklevel=3)


def _launch(dev, kind: str, c, inputs, outputs, rows: int) -> None:
    limits = config(dev) or (49152, 1024)
    ns = subgroups_for(kind, c.embed, c.embed_v, *limits)
    if not ns:
        raise ValueError(f"flash_attention: head dims {c.embed}/{c.embed_v} do not fit this device's workgroup memory")
    s = Shape(c.embed, c.embed_v, ns, c.causal, c.masked, c.dropout)
    kernel = dev.kernel(f"flash_sgmat_{kind}[{c.embed},{c.embed_v},{ns}]", generate(kind, s), len(inputs),
                        len(outputs), PARAM_FORMAT)
    dev.launch(kernel, inputs, outputs, c.params, (-(-rows // s.rows), c.batch, 1))


def forward(dev, c, inputs, out, lse) -> None:
    """Record the forward (flash_attention's checked call `c`) into out and lse."""
    _launch(dev, "forward", c, inputs, [out, lse], c.length)


def backward(dev, c, inputs, dq, dk, dv) -> None:
    """Record dQ and dK/dV from inputs (q, k, v, [mask,] grad_out, ld)."""
    _launch(dev, "dq", c, inputs, [dq], c.length)
    _launch(dev, "dkv", c, inputs, [dk, dv], c.source)
