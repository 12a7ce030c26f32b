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

PARAM_FORMAT = "IIfIIIIIIIIf" + "IIIII" * 4
# The last four rows of fields: where row g of batch entry z of q, k, v and of the output O
# starts, in 16-byte units (the matrix kernels; ops/flash_attention.Rows): off + (z / inner) * so
# + (z % inner) * si + g * rs -- so that strided views (nanoGPT's heads, split from one [B, T, 3C]
# product) are read in place, O is written in q's order of dims (nanoGPT's [B, T, H, D] once
# transposed back), and the gradients can be written where q, k and v lie (Shape.into). The
# portable kernels read q, k, v contiguous, write O contiguous and ignore them.
PARAMS_WGSL = """struct Params {
    length: u32, source: u32, scale: f32, m_inner: u32,
    m_so: u32, m_si: u32, m_rs: u32, m_cs: u32,
    seed_lo: u32, seed_hi: u32, threshold: u32, drop_scale: f32,
    q_in: u32, q_so: u32, q_si: u32, q_rs: u32, q_off: u32,
    k_in: u32, k_so: u32, k_si: u32, k_rs: u32, k_off: u32,
    v_in: u32, v_so: u32, v_si: u32, v_rs: u32, v_off: u32,
    o_in: u32, o_so: u32, o_si: u32, o_rs: u32, o_off: u32,
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
# Halves per element of sP, the per-subgroup f16 probabilities: 2 (u32 pairs, stored two halves a
# store) or 1 (f16, one store a half; benchmarks/flash_probe.py's variant sp16).
_P_UNIT = 2
KINDS = ("forward", "dq", "dkv")


class Shape(NamedTuple):
    """What a generated kernel depends on: head dims, subgroups per workgroup and flags."""

    d: int
    dv: int
    ns: int
    causal: bool
    masked: bool
    dropout: bool
    prefetch: bool = True   # the next tile's global loads issued before this tile's products (_tiles)
    into: bool = False      # gradients written where q, k, v lie (their Rows) in one buffer: DQ, DKV

    @property
    def rows(self) -> int:
        return 16 * self.ns


def _scratch_width(kind: str, bc: int, d: int, dv: int) -> int:
    """f32 per scratch row: the widest tile stored through it, plus 4 (16 bytes), so that
    rows start 4 banks apart (vec4 reads of 8 rows conflict-free; see _quads)."""
    return {"forward": max(bc, dv), "dq": max(bc, d), "dkv": max(bc, d, dv)}[kind] + 4


def workgroup_bytes(kind: str, d: int, dv: int, ns: int) -> int:
    bc = 16 * ns
    tiles = 2 * bc * (d + PAD) + 2 * bc * (dv + PAD)           # tA, tB (f16)
    scratch = 4 * ns * 16 * _scratch_width(kind, bc, d, dv)    # sS (f32)
    probs = 2 * ns * 16 * (bc + PAD)                           # sP (f16 pairs)
    rows = 4 * 2 * bc if kind == "dkv" else 0                  # sL: lse and D of the tile's queries
    return tiles + scratch + probs + rows


def subgroups_for(kind: str, d: int, dv: int, max_bytes: int = 49152, max_threads: int = 1024) -> int:
    """The most subgroups (4, 2 or 1) whose workgroup fits the limits; 0 if none."""
    return next((ns for ns in (4, 2, 1) if 32 * ns <= max_threads and workgroup_bytes(kind, d, dv, ns) <= max_bytes),
                0)


def serves(d: int, dv: int) -> bool:
    return d % 16 == 0 and dv % 16 == 0 and 16 <= d <= 128 and 16 <= dv <= 128


def _head(s: Shape, kind: str, inputs: list[str], outputs: list[str]) -> list[str]:
    """Bindings, workgroup arrays and main's first lines. Operands (Q, K, V, DO) are read as
    vec4<u32> (8 halves: rows of d and dv halves are whole units) into tiles of vec4<u32>
    (rows padded by 8 halves), which the matrix loads read in 16-byte units."""
    bc = s.rows
    L = ["diagnostic(off, chromium.subgroup_matrix_uniformity);", "diagnostic(off, subgroup_uniformity);",
         "enable f16;", "enable subgroups;", "enable chromium_experimental_subgroup_matrix;", PARAMS_WGSL]
    for b, name in enumerate(inputs, start=1):
        ty = "f32" if name in ("M", "LD", "LSE") else "vec4<u32>"
        L.append(f"@group(0) @binding({b}) var<storage, read> {name}: array<{ty}>;")
    for b, name in enumerate(outputs, start=len(inputs) + 1):
        ty = "f32" if name in ("LSE", "LD") else "vec4<u32>"   # f16 rows stored 8 halves a unit (_packed)
        L.append(f"@group(0) @binding({b}) var<storage, read_write> {name}: array<{ty}>;")
    sw = _scratch_width(kind, bc, s.d, s.dv)
    L += ["alias LM = subgroup_matrix_left<f16, 16, 16>;",
          "alias RM = subgroup_matrix_right<f16, 16, 16>;",
          "alias AM = subgroup_matrix_result<f32, 16, 16>;",
          f"const SW: u32 = {sw // 4}u;",             # scratch row pitch in vec4 units
          f"const PP: u32 = {(bc + PAD) // _P_UNIT}u;",   # sP row pitch in its elements
          f"const PA: u32 = {(s.d + PAD) // 8}u;",    # tA row pitch in 16-byte units
          f"const PB: u32 = {(s.dv + PAD) // 8}u;",
          f"var<workgroup> tA: array<vec4<u32>, {bc * (s.d + PAD) // 8}>;",     # K or Q rows (d wide)
          f"var<workgroup> tB: array<vec4<u32>, {bc * (s.dv + PAD) // 8}>;",    # V or dO rows (dv wide)
          f"var<workgroup> sS: array<vec4<f32>, {s.ns * 16 * sw // 4}>;",
          f"var<workgroup> sP: array<{'u32' if _P_UNIT == 2 else 'f16'}, {s.ns * 16 * (bc + PAD) // _P_UNIT}>;"]
    if kind == "dkv":
        L.append(f"var<workgroup> sL: array<f32, {2 * bc}>;")
    L += [HASH_WGSL,
          f"@compute @workgroup_size({32 * s.ns})",
          "fn main(@builtin(workgroup_id) wg: vec3<u32>, @builtin(local_invocation_index) li: u32,",
          "        @builtin(subgroup_id) sgid: u32, @builtin(subgroup_invocation_id) lane: u32) {",
          "  let z = wg.y;",
          # causal forward and dQ: the last query blocks (the most key tiles) are dispatched first
          f"  let base0 = {f'((P.length + {bc - 1}u) / {bc}u - 1u - wg.x)' if s.causal and kind != 'dkv' else 'wg.x'}"
          f" * {bc}u;",
          "  let r = lane % 16u;",
          "  let h = lane / 16u;",
          "  let sbase = sgid * 16u * SW;",
          "  let pbase = sgid * 16u * PP;"]
    return L


def _copy(s: Shape, reg: str, dst: str, src: str, row0: str, limit: str, cols: int, pitch: str,
          at: str) -> tuple[list[str], list[str]]:
    """Lines that fetch rows row0.. of this batch entry's [*, cols] f16 rows of `src` (row g's
    first 16-byte unit at `at`, with g) into registers reg0.., one unit a thread a round (rows
    from `limit` on read as zero), and lines that store them into tile dst."""
    units, per_row, threads = s.rows * cols // 8, cols // 8, 32 * s.ns
    fetch, stash = [], []
    for u in range(units // threads):       # exact: 16 ns rows of cols / 8 units over 32 ns threads
        fetch += ["  {",
                  f"    let e = li + {u * threads}u;",
                  f"    let g = {row0} + e / {per_row}u;",
                  f"    {reg}{u} = vec4<u32>(0u);",
                  f"    if (g < {limit}) {{ {reg}{u} = {src}[{at} + e % {per_row}u]; }}",
                  "  }"]
        stash += [f"  {dst}[((li + {u * threads}u) / {per_row}u) * {pitch} + (li + {u * threads}u) % {per_row}u] = "
                  f"{reg}{u};"]
    return fetch, stash


def _registers(s: Shape, reg: str, cols: int) -> list[str]:
    return [f"  var {reg}{u}: vec4<u32>;" for u in range(cols // 16)]


def _stage(s: Shape, dst: str, src: str, row0: str, limit: str, cols: int, pitch: str, at: str) -> list[str]:
    """Rows row0.. of `src` into tile dst now (see _copy; registers x0..)."""
    fetch, stash = _copy(s, "x", dst, src, row0, limit, cols, pitch, at)
    return ["  {"] + ["  " + x for x in _registers(s, "x", cols) + fetch + stash] + ["  }"]


def _tiles(s: Shape, var: str, first: str, copies: list[tuple], body: list[str], extra=None) -> list[str]:
    """The loop over the other side's tiles t = first.. < tiles, `var` = t * rows: each tile's
    rows (copies: (reg, dst, src, limit, cols, pitch, at) with row0 = var) staged in workgroup
    memory, then `body`. The next tile's fetches are issued before the body and stored after
    it, so that their latency hides behind this tile's products (registers: 2 d / 16 units).
    extra: (fetch, stash) lines of one more per-tile copy, with `nxt` the next tile's row0."""
    fetches, stashes = [], []
    for reg, dst, src, limit, cols, pitch, at in copies:
        f, st = _copy(s, reg, dst, src, "nxt", limit, cols, pitch, at)
        fetches += f
        stashes += st
    if extra:
        fetches += extra[0]
        stashes += extra[1]
    L = []
    for reg, _, _, _, cols, _, _ in copies:
        L += _registers(s, reg, cols)
    if not s.prefetch:     # fetch and store at the top of each tile (to measure the prefetch against)
        return L + ["  var nxt = 0u;",
                    f"  for (var t = {first}; t < tiles; t++) {{",
                    f"    let {var} = t * {s.rows}u;",
                    "    nxt = " + var + ";",
                    "    workgroupBarrier();"] + ["  " + x for x in fetches + stashes] + [
                    "    workgroupBarrier();"] + body + ["  }"]
    L += ["  workgroupBarrier();",
          f"  var nxt = {first} * {s.rows}u;"] + fetches + stashes
    L += [f"  for (var t = {first}; t < tiles; t++) {{",
          f"    let {var} = t * {s.rows}u;",
          "    workgroupBarrier();",
          f"    nxt = {var} + {s.rows}u;",
          "    let more = t + 1u < tiles;",
          "    if (more) {"] + ["    " + x for x in fetches] + ["    }"]
    L += body
    L += ["    workgroupBarrier();",
          "    if (more) {"] + ["    " + x for x in stashes] + ["    }",
          "  }"]
    return L


# Each operand's first unit in this batch entry, and row g's (see PARAMS_WGSL).
_ROWS = "\n".join(f"  let {x}z = P.{x}_off + (z / P.{x}_in) * P.{x}_so + (z % P.{x}_in) * P.{x}_si;" for x in "qkvo")
_AT = {x.upper(): f"{x}z + g * P.{x}_rs" for x in "qkv"}


def _do_at(s: Shape) -> str:
    """Row g of this batch entry's dO (contiguous [batch, length, dv])."""
    return f"(z * P.length + g) * {s.dv // 8}u"


def _lefts(name: str, arr: str, count: int, row_off: str, pitch: str, unit: int) -> list[str]:
    """count left matrices side by side from row_off (their columns 16 halves = 16 / unit
    elements of arr apart)."""
    return [f"  let {name}{kk} = subgroupMatrixLoad<LM, row_major>(&{arr}, {row_off} + {16 // unit * kk}u, {pitch});"
            for kk in range(count)]


def _quads(s: Shape) -> list[tuple[int, str, str]]:
    """This lane's share of a 16 x bc tile in the scratch, row r and half h of its columns, as
    (t, the vec4 unit's index, its first column): unit t of the half. Rows are 17 units apart,
    so the 8 lanes of each quarter-warp (rows r..r+7 of one half) read 8 different banks."""
    q = s.rows // 8
    return [(t, f"sbase + r * SW + h * {q}u + {t}u", f"h * {4 * q}u + {4 * t}u") for t in range(q)]


def _probs(s: Shape, t: int, value: str) -> list[str]:
    """Store the vec4<f32> named `value`, this lane's quad t (_quads) of probabilities, as f16
    into its row of sP (u32 pairs of halves: two 32-bit stores rather than four 16-bit ones)."""
    at = f"pbase + r * PP + h * {s.rows // 2 // _P_UNIT}u + {4 // _P_UNIT * t}u"
    if _P_UNIT == 1:
        return [f"    sP[{at} + {e}u] = f16({value}.{'xyzw'[e]});" for e in range(4)]
    return [f"    sP[{at}] = pack2x16float({value}.xy);", f"    sP[{at} + 1u] = pack2x16float({value}.zw);"]


def _scaled(s: Shape, at: str, first: str, along: str) -> str:
    """The vec4 of scores at scratch unit `at`, scaled, plus the mask's 4 values where masked
    (their keys (along="source") or queries (along="length") from `first`)."""
    if not s.masked:
        return f"sS[{at}] * P.scale"
    stride = "P.m_cs" if along == "source" else "P.m_rs"
    parts = ", ".join(f"M[mb + min({first} + {e}u, P.{along} - 1u) * {stride}]" for e in range(4))
    return f"sS[{at}] * P.scale + vec4<f32>({parts})"


def _products(name: str, lefts: str, count: int, arr: str, major: str, off, pitch: str, dst: int) -> list[str]:
    """Result matrices name0..: name{b} = sum_kk lefts{kk} x (right matrix off(b, kk) of arr),
    each stored to the scratch at column 16 b."""
    L = []
    for b in range(dst):
        L.append(f"    var {name}{b} = AM();")
        for kk in range(count):
            L.append(f"    {name}{b} = subgroupMatrixMultiplyAccumulate({lefts}{kk}, subgroupMatrixLoad<RM, {major}>("
                     f"&{arr}, {off(b, kk)}, {pitch}), {name}{b});")
        L.append(f"    subgroupMatrixStore<row_major>(&sS, sbase + {4 * b}u, {name}{b}, SW);")
    return L


def _accumulate(accs: str, lefts: str, count: int, arr: str, pitch: str, pitch_units: int, dst: int) -> list[str]:
    """accs{b} += sum_kk lefts{kk} x rows 16 kk.. , columns 16 b.. of tile arr (row_major)."""
    return [f"    {accs}{b} = subgroupMatrixMultiplyAccumulate({lefts}{kk}, subgroupMatrixLoad<RM, row_major>(&{arr}, "
            f"{16 * kk * pitch_units + 2 * b}u, {pitch}), {accs}{b});"
            for b in range(dst) for kk in range(count)]


def _packed(out: str, at: str, values: list[str]) -> list[str]:
    """Stores of f32 vec4 values (each 4 consecutive elements of a row, in pairs) as f16 into
    `out`, an array of vec4<u32>, from its 16-byte unit `at` on: one 16-byte store per 8
    halves. (With one f16 store per element, 32 a lane each writing 2 bytes of its own
    64-byte run, the kernels' skeletons at nanoGPT's shape took 102 / 116 / 181 us on the
    H200 against 52 / 85 / 69 with these: benchmarks/flash_probe.py, session 19.)"""
    return [f"    {out}[{at} + {u}u] = vec4<u32>(pack2x16float({a}.xy), pack2x16float({a}.zw), "
            f"pack2x16float({b}.xy), pack2x16float({b}.zw));"
            for u, (a, b) in enumerate(zip(values[0::2], values[1::2]))]


def _store_rows(s: Shape, mats: str, count: int, out: str, at: str, ok: str, cols: int, factor: str) -> list[str]:
    """The subgroup's result matrices mats0.. (16 x 16 * count) through the scratch into rows
    of `out` (this lane's row starts at 16-byte unit `at` and is written where `ok`; the lane
    writes its half of the row's cols)."""
    L = ["  workgroupBarrier();"]
    L += [f"  subgroupMatrixStore<row_major>(&sS, sbase + {4 * m}u, {mats}{m}, SW);" for m in range(count)]
    L += ["  workgroupBarrier();",
          f"  if ({ok}) {{"]
    L += [f"    let v{t} = {factor}sS[sbase + r * SW + h * {cols // 8}u + {t}u];" for t in range(cols // 8)]
    L += _packed(out, f"{at} + h * {cols // 16}u", [f"v{t}" for t in range(cols // 8)])
    L.append("  }")
    return L


def _ds_step(s: Shape, dvec, keep, lefts: str, accs: str) -> list[str]:
    """The backward's second half of a tile: dS = P * (dP - Dvec) of this lane's columns (P in
    registers p0.., dP from the scratch, dropped where keep(t, col) is false; Dvec of the
    columns' rows: dvec(col)), rounded to f16 in sP, then accs += dS x the rows of tA (dQ += dS K,
    dK += dS^T Q)."""
    B = []
    for t, at, col in _quads(s):
        B.append(f"    var dp{t} = sS[{at}];")
        if s.dropout:
            B.append(f"    dp{t} = select(vec4<f32>(0.0), dp{t} * P.drop_scale, {keep(t, col)});")
        B.append(f"    let dsv{t} = p{t} * (dp{t} - {dvec(col)});")
        B += _probs(s, t, f"dsv{t}")
    B.append("    workgroupBarrier();")
    B += ["  " + x for x in _lefts(lefts, "sP", s.rows // 16, "pbase", "PP", _P_UNIT)]
    return B + _accumulate(accs, lefts, s.rows // 16, "tA", "PA", (s.d + PAD) // 8, s.d // 16)


def _generate_forward(s: Shape) -> str:
    bc, d4 = s.rows, s.d // 16
    inputs = ["Q", "K", "V"] + (["M"] if s.masked else [])
    L = _head(s, "forward", inputs, ["O", "LSE"])
    L += ["  let i = base0 + sgid * 16u + r;",
          "  let ic = min(i, P.length - 1u);",
          _ROWS]
    L += _stage(s, "tA", "Q", "base0", "P.length", s.d, "PA", _AT["Q"])
    L += ["  workgroupBarrier();"] + _lefts("q", "tA", d4, "sgid * 16u * PA", "PA", 8)
    L += [f"  var o{t} = vec4<f32>(0.0);" for t in range(s.dv // 8)]
    L += ["  var m = NEG;", "  var lh = 0.0;",
          "  let jend = " + ("min(P.source, i + 1u);" if s.causal else "P.source;"),
          "  let jend_wg = " + (f"min(P.source, base0 + {bc}u);" if s.causal else "P.source;"),
          f"  let tiles = (jend_wg + {bc - 1}u) / {bc}u;"]
    if s.masked:
        L.append("  let mb = (z / P.m_inner) * P.m_so + (z % P.m_inner) * P.m_si + ic * P.m_rs;")
    B = _products("s", "q", d4, "tA", "col_major", lambda b, kk: f"{16 * b}u * PA + {2 * kk}u", "PA", bc // 16)
    B += ["    workgroupBarrier();", "    var mt = NEG;"]
    for t, at, col in _quads(s):     # the max of this lane's scaled (and masked) scores
        B += [f"    let x{t} = {_scaled(s, at, f'j0 + {col}', 'source')};"]
        B += [f"    mt = max(mt, select(NEG, x{t}.{'xyzw'[e]}, j0 + {col} + {e}u < jend));" for e in range(4)]
    B += ["    mt = max(mt, subgroupShuffleXor(mt, 16u));",
          "    let mn = max(m, mt);",
          "    let live = mn > NEG;",
          "    let mu = select(0.0, mn, live);",
          "    let alpha = select(1.0, exp(m - mn), live);",
          "    var ps = 0.0;"]
    for t, at, col in _quads(s):     # read again rather than kept: registers are what limit residency
        B.append(f"    let y{t} = {_scaled(s, at, f'j0 + {col}', 'source')};")
        for e in range(4):
            j = f"j0 + {col} + {e}u"
            B += [f"    let p{t}{e} = select(0.0, exp(y{t}.{'xyzw'[e]} - mu), {j} < jend && live);",
                  f"    ps += p{t}{e};"]
        w = [f"select(0.0, p{t}{e} * P.drop_scale, kept(z, i, j0 + {col} + {e}u))" if s.dropout else f"p{t}{e}"
             for e in range(4)]
        B.append(f"    let pq{t} = vec4<f32>({', '.join(w)});")
        B += _probs(s, t, f"pq{t}")
    B += ["    lh = lh * alpha + ps;",
          "    m = mn;"]
    B += [f"    o{t} *= alpha;" for t in range(s.dv // 8)]
    B.append("    workgroupBarrier();")
    B += ["  " + x for x in _lefts("pm", "sP", bc // 16, "pbase", "PP", _P_UNIT)]
    B += _products("a", "pm", bc // 16, "tB", "row_major", lambda b, kk: f"{16 * kk}u * PB + {2 * b}u", "PB",
                   s.dv // 16)
    B.append("    workgroupBarrier();")
    B += [f"    o{t} += sS[sbase + r * SW + h * {s.dv // 8}u + {t}u];" for t in range(s.dv // 8)]
    L += _tiles(s, "j0", "0u", [("fk", "tA", "K", "P.source", s.d, "PA", _AT["K"]),
                                 ("fv", "tB", "V", "P.source", s.dv, "PB", _AT["V"])], B)
    L += ["  let l = lh + subgroupShuffleXor(lh, 16u);",
          "  if (i < P.length) {",
          "    let inv = select(0.0, 1.0 / l, l > 0.0);",
          f"    let ob = oz + i * P.o_rs + h * {s.dv // 16}u;"]
    L += [f"    let w{t} = o{t} * inv;" for t in range(s.dv // 8)]
    L += _packed("O", "ob", [f"w{t}" for t in range(s.dv // 8)])
    L += ["    if (h == 0u) { LSE[z * P.length + i] = select(EMPTY, m + log(l), l > 0.0); }",
          "  }",
          "}"]
    return "\n".join(L) + "\n"


def _generate_dq(s: Shape) -> str:
    bc, d4, v4 = s.rows, s.d // 16, s.dv // 16
    inputs = ["Q", "K", "V"] + (["M"] if s.masked else []) + ["DO", "LSE", "O"]
    L = _head(s, "dq", inputs, ["DQ", "LD"])
    L += ["  let i = base0 + sgid * 16u + r;",
          "  let ic = min(i, P.length - 1u);",
          "  let row = z * P.length + ic;",
          "  let lse = LSE[row];",
          _ROWS]
    L += _stage(s, "tA", "Q", "base0", "P.length", s.d, "PA", _AT["Q"])
    L += _stage(s, "tB", "DO", "base0", "P.length", s.dv, "PB", _do_at(s))
    L.append("  workgroupBarrier();")
    # Dvec = rowsum(dO * O) of this lane's row (its half, then the other half's), stored with lse
    # for the dK/dV kernel, which runs after this one.
    L.append("  var dd = 0.0;")
    for t in range(s.dv // 16):
        L += [f"  let gu{t} = tB[(sgid * 16u + r) * PB + h * {s.dv // 16}u + {t}u];",
              f"  let ou{t} = O[oz + ic * P.o_rs + h * {s.dv // 16}u + {t}u];"]
        L += [f"  dd += dot(unpack2x16float(gu{t}.{w}), unpack2x16float(ou{t}.{w}));" for w in "xyzw"]
    L += ["  let dvec = dd + subgroupShuffleXor(dd, 16u);",
          "  if (i < P.length && h == 0u) { LD[2u * row] = lse; LD[2u * row + 1u] = dvec; }"]
    L += _lefts("q", "tA", d4, "sgid * 16u * PA", "PA", 8)
    L += _lefts("g", "tB", v4, "sgid * 16u * PB", "PB", 8)
    L += [f"  var dq{b} = AM();" for b in range(d4)]
    L += ["  let jend = " + ("min(P.source, i + 1u);" if s.causal else "P.source;"),
          "  let jend_wg = " + (f"min(P.source, base0 + {bc}u);" if s.causal else "P.source;"),
          f"  let tiles = (jend_wg + {bc - 1}u) / {bc}u;"]
    if s.masked:
        L.append("  let mb = (z / P.m_inner) * P.m_so + (z % P.m_inner) * P.m_si + ic * P.m_rs;")
    B: list[str] = []
    B += _products("s", "q", d4, "tA", "col_major", lambda b, kk: f"{16 * b}u * PA + {2 * kk}u", "PA", bc // 16)
    B.append("    workgroupBarrier();")
    for t, at, col in _quads(s):     # the probabilities of this lane's columns
        ok = ", ".join(f"j0 + {col} + {e}u < jend" for e in range(4))
        B.append(f"    let p{t} = select(vec4<f32>(0.0), exp({_scaled(s, at, f'j0 + {col}', 'source')} - lse), "
                 f"vec4<bool>({ok}));")
    B.append("    workgroupBarrier();")     # every lane has read S: dP = dO V^T over it
    B += _products("e", "g", v4, "tB", "col_major", lambda b, kk: f"{16 * b}u * PB + {2 * kk}u", "PB", bc // 16)
    B.append("    workgroupBarrier();")
    B += _ds_step(s, lambda col: "dvec",
                  lambda t, col: "vec4<bool>(" + ", ".join(f"kept(z, i, j0 + {col} + {e}u)" for e in range(4)) + ")",
                  "ds", "dq")
    L += _tiles(s, "j0", "0u", [("fk", "tA", "K", "P.source", s.d, "PA", _AT["K"]),
                                 ("fv", "tB", "V", "P.source", s.dv, "PB", _AT["V"])], B)
    if s.into:
        L += _store_rows(s, "dq", d4, "DQ", "qz + i * P.q_rs", "i < P.length", s.d, "P.scale * ")
    else:
        L += _store_rows(s, "dq", d4, "DQ", f"(z * P.length + i) * {s.d // 8}u", "i < P.length", s.d, "P.scale * ")
    L.append("}")
    return "\n".join(L) + "\n"


def _generate_dkv(s: Shape) -> str:
    bc, d4, v4 = s.rows, s.d // 16, s.dv // 16
    inputs = ["Q", "K", "V"] + (["M"] if s.masked else []) + ["DO", "LD"]
    L = _head(s, "dkv", inputs, ["DKV"] if s.into else ["DK", "DV"])
    L += ["  let j = base0 + sgid * 16u + r;",
          "  let jc = min(j, P.source - 1u);",
          _ROWS]
    L += _stage(s, "tA", "K", "base0", "P.source", s.d, "PA", _AT["K"])
    L += _stage(s, "tB", "V", "base0", "P.source", s.dv, "PB", _AT["V"])
    L += ["  workgroupBarrier();"] + _lefts("k", "tA", d4, "sgid * 16u * PA", "PA", 8)
    L += _lefts("v", "tB", v4, "sgid * 16u * PB", "PB", 8)
    L += [f"  var dk{b} = AM();" for b in range(d4)]
    L += [f"  var dv{b} = AM();" for b in range(v4)]
    L += ["  let first = " + ("wg.x;" if s.causal else "0u;"),
          f"  let tiles = (P.length + {bc - 1}u) / {bc}u;"]
    if s.masked:
        L.append("  let mb = (z / P.m_inner) * P.m_so + (z % P.m_inner) * P.m_si + jc * P.m_cs;")
    # lse and Dvec of the tile's 2 bc rows: one value a thread (2 * 16 ns = 32 ns)
    L.append("  var fl: f32;")
    rows_copy = (["  fl = LD[2u * (z * P.length + min(nxt + li / 2u, P.length - 1u)) + li % 2u];"], ["  sL[li] = fl;"])
    B = _products("s", "k", d4, "tA", "col_major", lambda b, kk: f"{16 * b}u * PA + {2 * kk}u", "PA", bc // 16)
    B.append("    workgroupBarrier();")
    for t, at, col in _quads(s):     # column c of S^T is query i0 + c
        ok = ", ".join(f"i0 + {col} + {e}u < P.length" + (f" && i0 + {col} + {e}u >= j" if s.causal else "")
                       for e in range(4))
        lse = ", ".join(f"sL[2u * ({col} + {e}u)]" for e in range(4))
        B.append(f"    let p{t} = select(vec4<f32>(0.0), exp({_scaled(s, at, f'i0 + {col}', 'length')} - "
                 f"vec4<f32>({lse})), vec4<bool>({ok}));")
        w = f"p{t}"
        if s.dropout:
            keep = ", ".join(f"kept(z, i0 + {col} + {e}u, j)" for e in range(4))
            B.append(f"    let keep{t} = vec4<bool>({keep});")
            w = f"select(vec4<f32>(0.0), p{t} * P.drop_scale, keep{t})"
        B.append(f"    let w{t} = {w};")
        B += _probs(s, t, f"w{t}")
    B.append("    workgroupBarrier();")
    B += ["  " + x for x in _lefts("pt", "sP", bc // 16, "pbase", "PP", _P_UNIT)]
    B += _accumulate("dv", "pt", bc // 16, "tB", "PB", (s.dv + PAD) // 8, v4)
    B += _products("e", "v", v4, "tB", "col_major", lambda b, kk: f"{16 * b}u * PB + {2 * kk}u", "PB", bc // 16)
    B.append("    workgroupBarrier();")     # dP^T stored; every P^T load done: sP takes dS^T
    B += _ds_step(s, lambda col: "vec4<f32>(" + ", ".join(f"sL[2u * ({col} + {e}u) + 1u]" for e in range(4)) + ")",
                  lambda t, col: f"keep{t}", "dt", "dk")
    L += _tiles(s, "i0", "first", [("fq", "tA", "Q", "P.length", s.d, "PA", _AT["Q"]),
                                    ("fg", "tB", "DO", "P.length", s.dv, "PB", _do_at(s))], B, rows_copy)
    if s.into:    # dK and dV into one buffer, where k and v lie
        L += _store_rows(s, "dk", d4, "DKV", "kz + j * P.k_rs", "j < P.source", s.d, "P.scale * ")
        L += _store_rows(s, "dv", v4, "DKV", "vz + j * P.v_rs", "j < P.source", s.dv, "")
    else:
        L += _store_rows(s, "dk", d4, "DK", f"(z * P.source + j) * {s.d // 8}u", "j < P.source", s.d, "P.scale * ")
        L += _store_rows(s, "dv", v4, "DV", f"(z * P.source + j) * {s.dv // 8}u", "j < P.source", s.dv, "")
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


def _launch(dev, kind: str, c, inputs, outputs, rows: int, into: bool = False) -> None:
    limits = config(dev) or (49152, 1024)
    ns = subgroups_for(kind, c.embed, c.embed_v, *limits)
    if not ns:
        raise ValueError(f"flash_attention: head dims {c.embed}/{c.embed_v} do not fit this device's workgroup memory")
    # ANYGPU_FLASH_PREFETCH=0: no register prefetch of the next tile (to measure it against)
    s = Shape(c.embed, c.embed_v, ns, c.causal, c.masked, c.dropout, os.environ.get("ANYGPU_FLASH_PREFETCH") != "0",
              into)
    kernel = dev.kernel(f"flash_sgmat_{kind}[{c.embed},{c.embed_v},{ns}{',into' if into else ''}]", generate(kind, s),
                        len(inputs), len(outputs), PARAM_FORMAT)
    dev.launch(kernel, inputs, outputs, c.params, (-(-rows // s.rows), c.batch, 1))


def forward(dev, c, inputs, out, lse) -> None:
    """Record the forward (flash_attention's checked call `c`) into out and lse."""
    _launch(dev, "forward", c, inputs, [out, lse], c.length)


def backward(dev, c, operands, grad_out, out, lse, dq, dk, dv, into: bool = False) -> None:
    """Record dQ and dK/dV from operands (q, k, v[, mask]), grad_out, the forward's out and
    lse: the dQ kernel also stores each row's lse and Dvec = rowsum(dO * O), which the dK/dV
    kernel reads. into: dq is one buffer that takes all three gradients where q, k and v lie
    (c's Rows; dk and dv are not used)."""
    ld = dev.empty(2 * c.batch * c.length, "f32")
    _launch(dev, "dq", c, [*operands, grad_out, lse, out], [dq, ld], c.length, into)
    _launch(dev, "dkv", c, [*operands, grad_out, ld], [dq] if into else [dk, dv], c.source, into)
