"""Matrix products on the GPU's matrix units (Layer 0): tensor cores on NVIDIA, WMMA on AMD,
XMX on Intel, simdgroup matrices on Apple, reached through WGSL subgroup matrices
(Dawn's `chromium_experimental_subgroup_matrix`; the runtime offers them as
`dev.matrix_configs`, see runtime/).

One generated kernel family, C[z] = alpha * op(A[z]) @ op(B[z]) (+ bias), f16 operands,
f32 accumulation, an f16 or f32 result:

- a workgroup computes a BM x BN tile of C with `wm x wn` subgroups, each holding
  `tm x tn` result matrices of m0 x n0 (one of the adapter's configs) in f32;
- k advances TK at a time through two stages of workgroup memory: the next stage's
  global loads are issued into registers before the current stage's multiplies, and
  stored after them, so one barrier per step separates the stages; or (`single`, name
  suffix _s) through one stage: fetch, store, barrier, multiply, barrier -- fewer registers,
  more subgroups resident, room for a 64-deep step (faster on the H200 in every shape tried);
  with `prefetch` (_p) the one stage is kept and the next step's loads are issued into
  registers before this step's multiplies (the tuner's pick for most of nanoGPT's products);
- `wide` (_v): the tiles of 8-half operands are vec4<u32> arrays, one 16-byte store per
  thread and fetch, matrices loaded with offsets and strides in 16-byte units (Tint counts
  them in the array's elements);
- workgroup memory keeps each operand tile as it is stored in memory (rows of A or of
  A^T, of B or of B^T), so global loads are contiguous in every transpose case: a
  transposed tile is read into matrices with `col_major` loads;
- loads are 8 halves (one vec4<u32>) per thread where the operand's rows are multiples of
  8 halves long, single halves otherwise; everything out of range is read as zero, so any
  m, n, k works (edge tiles);
- the store: a whole-tile f32 product with alpha 1 and no bias goes straight from the
  matrices to C; otherwise each result matrix passes through a small per-subgroup f32
  scratch, from which the subgroup's lanes write it with bounds checks, alpha, the bias
  and the conversion to f16 -- with `epi` (_e, wide members) in rounds of several matrices
  through the dead tiles, two barriers a round rather than two a matrix;
- a long A^T @ B with few result tiles (weight gradients) runs as `split_k` slices, the
  batches of one launch, summed in f32 with the bias by one more launch.

Which member runs a product: `choose(dev, problem, out, bias)` asks the tuner (ops/tuner.py,
the family's Tunable in ops/sgmat_tune.py) per shape bucket among a shortlist of the
adapter's members (`candidates()`); untuned it is the device's default member, the first of
`PREFERRED` that the adapter allows. ANYGPU_SGMAT_CONFIG=<name> runs every product with one
member; ANYGPU_MATRIX_UNITS=0 turns the family off."""

from __future__ import annotations

import functools
import os
import warnings
from typing import NamedTuple

from .matmul_problem import PARAM_FORMAT, Problem


class SgConfig(NamedTuple):
    """One member of the family: the matrix config (m0, n0, k0) and subgroup size sg, the
    subgroup grid wm x wn, the matrices per subgroup tm x tn and the k step tk."""

    m0: int = 16
    n0: int = 16
    k0: int = 16
    sg: int = 32
    wm: int = 2
    wn: int = 4
    tm: int = 4
    tn: int = 2
    tk: int = 32
    wide: bool = False   # workgroup tiles as vec4<u32>: one 16-byte store per 8 halves fetched
    epi: bool = False    # (with wide) the f16/bias/alpha store in rounds through the dead tiles
    single: bool = False  # one stage of workgroup memory, no register prefetch (two barriers a step)
    slots: bool = False   # (_v_e_s) each subgroup's tile rows in their own workgroup array: matrix loads at
    #                       literal offsets, which Dawn's robustness then leaves unpredicated (_c)
    prefetch: bool = False  # (with single, _p) the next k step's global loads issued into registers
    #                         before this step's multiplies: one stage of workgroup memory, the fetch's
    #                         latency hidden behind the products rather than by other workgroups

    @property
    def bm(self) -> int:
        return self.wm * self.tm * self.m0

    @property
    def bn(self) -> int:
        return self.wn * self.tn * self.n0

    @property
    def threads(self) -> int:
        return self.wm * self.wn * self.sg

    @property
    def name(self) -> str:
        return (f"sg{self.m0}x{self.n0}x{self.k0}s{self.sg}_w{self.wm}x{self.wn}"
                f"_t{self.tm}x{self.tn}_k{self.tk}" + ("_v" if self.wide else "") + ("_e" if self.epi else "")
                + ("_s" if self.single else "") + ("_c" if self.slots else "") + ("_p" if self.prefetch else ""))

    @classmethod
    def parse(cls, name: str) -> "SgConfig":
        """The config that `name` names (as stored in the tuner cache)."""
        try:
            head, w, t, k, *flags = name.split("_")
            prefetch = bool(flags) and flags[-1] == "p"
            if prefetch:
                flags.pop()
                if "s" not in flags:
                    raise ValueError(name)
            slots = bool(flags) and flags[-1] == "c"
            if slots:
                flags.pop()
                if flags != ["v", "e", "s"]:
                    raise ValueError(name)
            if not head.startswith("sg") or flags not in ([], ["v"], ["v", "e"], ["s"], ["v", "s"], ["v", "e", "s"]):
                raise ValueError(name)
            mnk, sg = head[2:].split("s")
            m0, n0, k0 = (int(x) for x in mnk.split("x"))
            wm, wn = (int(x) for x in w[1:].split("x"))
            tm, tn = (int(x) for x in t[1:].split("x"))
            return cls(m0, n0, k0, int(sg), wm, wn, tm, tn, int(k[1:]), "v" in flags, "e" in flags, "s" in flags,
                       slots, prefetch)
        except (ValueError, IndexError):
            raise ValueError(f"sgmat: not a subgroup-matrix config name: {name!r}") from None

    def workgroup_bytes(self) -> int:
        if self.slots:   # the largest of the transposes' slot layouts, with its scratch
            return max(_slot_layout(self, ta, tb)[-1] for ta in (False, True) for tb in (False, True))
        # the larger of the two layouts of each operand (plain or transposed)
        a = max(self.bm * (self.tk + _PAD), self.tk * (self.bm + _PAD))
        b = max(self.tk * (self.bn + _PAD), self.bn * (self.tk + _PAD))
        return (1 if self.single else 2) * 2 * (a + b) + 4 * self.wm * self.wn * self.m0 * self.n0

    def valid(self, max_invocations: int = 1024, max_workgroup_bytes: int = 49152) -> bool:
        return (self.threads <= max_invocations and self.workgroup_bytes() <= max_workgroup_bytes
                and self.tk % self.k0 == 0 and self.tk % 8 == 0
                and (not self.slots or (self.wide and self.epi and self.single))
                and (not self.prefetch or self.single))


# The matmul family's uniform block (kernels/lib/matmul_params.wgsl, matmul_gen.PARAM_FORMAT).
_PARAMS = """struct Params {
    m: u32, n: u32, k: u32, batch: u32,
    a_rs: u32, a_cs: u32, b_rs: u32, b_cs: u32,
    a_bs: u32, b_bs: u32, c_bs: u32, alpha_bits: u32,
}
@group(0) @binding(0) var<uniform> P: Params;"""
_PAD = 8  # halves of padding per workgroup-memory row (16 bytes), against bank conflicts
_SLOT_BYTES = 49152  # the workgroup memory a slotted member's store scratch may fill up to


def _slot_layout(c: SgConfig, trans_a: bool, trans_b: bool) -> tuple:
    """A slotted member's workgroup memory for operands stored plain or transposed: per operand
    the split of its tile into the subgroup grid's slots (see _tile_copy), the slot's size in
    16-byte units and its rows' pitch in halves; then the store's rounds (result matrices per
    subgroup at once through its scratch), whether that scratch lies in the dead A slots (the
    wn subgroups of a grid row share their row's slot) rather than in a slot array of its own,
    and the bytes in all."""
    ra, rb = c.tm * c.m0, c.tn * c.n0        # rows of A, columns of B, one subgroup's
    if trans_a:   # stored [k][m]: a subgroup's m columns
        a = (("cols", ra), c.tk * (ra + _PAD) // 8, ra + _PAD)
    else:
        a = (("rows", ra), ra * (c.tk + _PAD) // 8, c.tk + _PAD)
    if trans_b:   # stored [n][k]: a subgroup's n rows
        b = (("rows", rb), rb * (c.tk + _PAD) // 8, c.tk + _PAD)
    else:
        b = (("cols", rb), c.tk * (rb + _PAD) // 8, rb + _PAD)
    tiles = 16 * (c.wm * a[1] + c.wn * b[1])
    matrix = 16 * c.m0 * (c.n0 // 4 + 1)       # one f32 result matrix in the scratch
    nsub = c.wm * c.wn
    in_a = min(c.tm * c.tn, a[1] * 16 // matrix // c.wn)
    if in_a:
        return a, b, in_a, True, tiles
    rounds = max(1, min(c.tm * c.tn, (_SLOT_BYTES - tiles) // (nsub * matrix)))
    return a, b, rounds, False, tiles + rounds * nsub * matrix


class Layout(NamedTuple):
    """What the source depends on besides the config: transposes, the load width of each
    operand (8: vec4<u32> loads, 1: single halves), the result type, a bias, and whether
    the store may go straight from the matrices to C."""

    trans_a: bool
    trans_b: bool
    vec_a: int
    vec_b: int
    out: str          # "f32" or "f16"
    bias: bool
    direct: bool      # whole tiles, f32, alpha 1, no bias
    vec_c: int = 1    # 4: rows of C (and the bias) are multiples of 4 elements, so the epi store
    #                   writes 4 results at once (a vec4<f16> or vec4<f32>) instead of one by one


def layout(config: SgConfig, problem: Problem, out: str, bias: bool) -> Layout:
    """The Layout of `problem` under `config` with result type `out`."""
    m, n, k = problem.m, problem.n, problem.k
    a_ld = m if problem.trans_a else k      # halves per stored row
    b_ld = k if problem.trans_b else n
    vec_a = 8 if a_ld % 8 == 0 else 1
    vec_b = 8 if b_ld % 8 == 0 else 1
    direct = (out == "f32" and not bias and problem.alpha == 1.0 and m % config.bm == 0
              and n % config.bn == 0)
    # ANYGPU_SGMAT_VEC_C=0: results stored one by one (to measure the vec4 store against).
    vec_c = 4 if n % 4 == 0 and os.environ.get("ANYGPU_SGMAT_VEC_C", "1") != "0" else 1
    return Layout(problem.trans_a, problem.trans_b, vec_a, vec_b, out, bias, direct, vec_c)


def _tile_copy(name: str, src: str, rows: int, cols: int, vec: int, threads: int, ld: str,
               r0: str, c0: str, rmax: str, cmax: str, base: str, reg: str,
               wide: bool = False, split: tuple[str, int] | None = None) -> tuple[list[str], list[str]]:
    """Lines that fetch a rows x cols tile (stored rows of `ld` halves starting at row r0,
    column c0 of the matrix at `base`) into registers, and lines that stash the registers in
    workgroup array `name` (rows of cols + _PAD halves; `wide`: an array of vec4<u32>, one
    store per 8 halves). Out of range reads as zero.

    split (wide only): `name` is an array of slots, one per subgroup row or column of the grid:
    ("rows", R) puts rows [i R, (i + 1) R) in slot i (rows of cols + _PAD halves), ("cols", W)
    columns [i W, (i + 1) W) (rows of W + _PAD halves)."""
    pitch = cols + _PAD
    units = rows * cols // vec
    per = -(-units // threads)
    guard = "" if units % threads == 0 else f" && e < {units}u"   # the last round of a ragged split
    fetch, stash = [], []
    for u in range(per):
        fetch += [
            "{",
            f"  let e = li + {u * threads}u;",
            f"  let r = e / {cols // vec}u;",
            f"  let c = (e % {cols // vec}u) * {vec}u;",
            f"  let gr = {r0} + r;",
            f"  let gc = {c0} + c;",
        ]
        if vec == 8:
            fetch += [f"  {reg}{u} = vec4<u32>(0u);",
                      f"  if (gr < {rmax} && gc < {cmax}{guard}) {{ {reg}{u} = {src}[({base} + gr * {ld} + gc) / 8u]; }}"]
        else:
            fetch += [f"  {reg}{u} = 0.0h;",
                      f"  if (gr < {rmax} && gc < {cmax}{guard}) {{ {reg}{u} = {src}[{base} + gr * {ld} + gc]; }}"]
        fetch.append("}")
        stash += ["{", f"  let e = li + {u * threads}u;"]
        if guard and u == per - 1:
            stash.append(f"  if (e < {units}u) {{")
        if split:
            r, cc = f"(e / {cols // vec}u)", f"(e % {cols // vec}u) * 8u"
            how, size = split
            slot, at = ((f"{r} / {size}u", f"(({r} % {size}u) * {pitch}u + {cc}) / 8u") if how == "rows" else
                        (f"{cc} / {size}u", f"({r} * {size + _PAD}u + {cc} % {size}u) / 8u"))
            stash.append(f"  {name}[{slot}][{at}] = {reg}{u};")
        else:
            stash.append(f"  let s = stage + (e / {cols // vec}u) * {pitch}u + (e % {cols // vec}u) * {vec}u;")
            stash += stash_unit(name, f"{reg}{u}", wide, vec)
        if guard and u == per - 1:
            stash.append("  }")
        stash.append("}")
    return fetch, stash


def stash_unit(name: str, value: str, wide: bool, vec: int) -> list[str]:
    """Lines that store register `value` at half `s` of workgroup tile `name` (the matrix
    families' tiles, this one's and conv_sgmat's): one 16-byte unit (`wide`: an array of
    vec4<u32>), its 8 halves one by one (vec 8 into an array of f16), or one half."""
    if wide:
        return [f"  {name}[s / 8u] = {value};"]
    if vec == 8:
        return [line for w, comp in enumerate("xyzw") for line in (
            f"  let h{w} = bitcast<vec2<f16>>({value}.{comp});",
            f"  {name}[s + {2 * w}u] = h{w}.x; {name}[s + {2 * w + 1}u] = h{w}.y;")]
    return [f"  {name}[s] = {value};"]


def entry_point(sg: int, emulate: bool) -> list[str]:
    """The first lines of `main` in the matrix families (this one's, conv_sgmat's): the
    subgroup id and lane as builtins, or, emulated, computed from the invocation index."""
    if emulate:
        return ["fn main(@builtin(workgroup_id) wg: vec3<u32>, @builtin(local_invocation_index) li: u32) {",
                f"  let sgid = li / {sg}u;",
                f"  let lane = li % {sg}u;"]
    return ["fn main(@builtin(workgroup_id) wg: vec3<u32>, @builtin(local_invocation_index) li: u32,",
            "        @builtin(subgroup_id) sgid: u32, @builtin(subgroup_invocation_id) lane: u32) {"]


@functools.lru_cache(maxsize=None)
def generate(config: SgConfig, lay: Layout, emulate: bool = False) -> str:
    """The WGSL of `config` for layout `lay` (bindings: 0 the matmul uniform block, 1 A,
    2 B, [3 bias,] then C).

    emulate: the same kernel with each subgroup-matrix load, multiply-accumulate and store
    written as scalar code over workgroup memory (as conv_sgmat.generate's), so that adapters
    without matrix units (lavapipe in CI) run every index of the real kernel: a loaded matrix
    is its offset, stride and major, read as the builtin reads them (offset and stride in the
    array's elements: 16-byte units in vec4<u32> tiles); lane l of subgroup s (thread
    s * sg + l) holds elements l, l + sg, ... (row-major) of each result matrix, and stores
    them with the same units. For tests, slow."""
    c = config
    bm, bn, tk, nt = c.bm, c.bn, c.tk, c.threads
    # Operand tiles as stored: A is [m, k] (rows of k) or, transposed, [k, m] (rows of m).
    a_rows, a_cols = (tk, bm) if lay.trans_a else (bm, tk)
    b_rows, b_cols = (bn, tk) if lay.trans_b else (tk, bn)
    a_size = a_rows * (a_cols + _PAD)
    b_size = b_rows * (b_cols + _PAD)
    a_ty = "vec4<u32>" if lay.vec_a == 8 else "f16"
    b_ty = "vec4<u32>" if lay.vec_b == 8 else "f16"
    # wide: the tiles of 8-half operands live in vec4<u32> arrays, matrices load from them with
    # offsets and strides in 16-byte units (Tint counts both in the array's elements).
    a_wide, b_wide = c.wide and lay.vec_a == 8, c.wide and lay.vec_b == 8
    # combined (epi): both tiles in one array, which the store's scratch reuses once they are dead.
    combined = c.epi and a_wide and b_wide and not c.slots
    # slotted (_c, wide operands): each subgroup row's A rows and column's B columns in a slot of
    # their own (sA[sgm], sB[sgn]); the store's scratch in the dead A slots or in sC[sgid].
    slotted = c.slots and a_wide and b_wide
    epi_store = combined or slotted
    arr_a, arr_b = ("sM", "sM") if combined else ("sA", "sB")
    nst = 1 if c.single else 2                                   # stages of workgroup memory
    base_a, base_b = (0, nst * a_size) if combined else (0, 0)   # in halves
    if emulate:
        L = ["enable f16;"]
    else:
        L = ["diagnostic(off, chromium.subgroup_matrix_uniformity);", "enable f16;", "enable subgroups;",
             "enable chromium_experimental_subgroup_matrix;"]
    L += [_PARAMS,
         f"@group(0) @binding(1) var<storage, read> A: array<{a_ty}>;",
         f"@group(0) @binding(2) var<storage, read> B: array<{b_ty}>;"]
    # The epi store writes a row's 4 results at once where C's rows are multiples of 4 long (every
    # 4-aligned column then starts a whole vec4 inside its row, and each batch's C too).
    # (Not for the direct store: subgroupMatrixStore counts C's offset and stride in its elements.)
    vec_c = epi_store and lay.vec_c == 4 and not lay.direct
    c_ty = f"vec4<{lay.out}>" if vec_c else lay.out
    cb = 3
    if lay.bias:
        L.append(f"@group(0) @binding(3) var<storage, read> Bias: array<{'vec4<f16>' if vec_c else 'f16'}>;")
        cb = 4
    L.append(f"@group(0) @binding({cb}) var<storage, read_write> C: array<{c_ty}>;")
    if emulate:   # a left or right matrix: its offset, stride and major in its array; a result: the lane's part
        L += ["alias LM = vec3<u32>;", "alias RM = vec3<u32>;", f"alias AM = array<f32, {c.m0 * c.n0 // c.sg}>;",
              "const row_major = 0u;", "const col_major = 1u;"]
    else:
        L += [f"alias LM = subgroup_matrix_left<f16, {c.k0}, {c.m0}>;",
              f"alias RM = subgroup_matrix_right<f16, {c.n0}, {c.k0}>;",
              f"alias AM = subgroup_matrix_result<f32, {c.n0}, {c.m0}>;"]
    nsub = c.wm * c.wn
    m_pitch = c.n0 // 4 + 1                     # scratch rows in 16-byte units (+1 against conflicts)
    m_size = c.m0 * m_pitch
    if combined:
        units = max(nst * (a_size + b_size) // 8, nsub * m_size)
        L.append(f"var<workgroup> sM: array<vec4<u32>, {units}>;")
        rounds_of = max(1, min(c.tm * c.tn, units // (nsub * m_size)))
    elif slotted:
        (split_a, slot_a, pitch_a), (split_b, slot_b, pitch_b), rounds_of, in_a, _ = _slot_layout(
            c, lay.trans_a, lay.trans_b)
        # the store's scratch: rounds_of matrices a subgroup, in its grid row's dead A slot
        # (sA[sgm], after the scratch of the row's subgroups before it) or in sC[sgid]
        scratch_arr, slot_c = ("sA", slot_a) if in_a else ("sC", rounds_of * m_size)
        L.append(f"var<workgroup> sA: array<array<vec4<u32>, {slot_a}>, {c.wm}>;")
        L.append(f"var<workgroup> sB: array<array<vec4<u32>, {slot_b}>, {c.wn}>;")
        if not lay.direct and not in_a:
            L.append(f"var<workgroup> sC: array<array<vec4<u32>, {slot_c}>, {nsub}>;")
    else:
        L.append(f"var<workgroup> sA: array<{'vec4<u32>' if a_wide else 'f16'}, {nst * a_size // (8 if a_wide else 1)}>;")
        L.append(f"var<workgroup> sB: array<{'vec4<u32>' if b_wide else 'f16'}, {nst * b_size // (8 if b_wide else 1)}>;")
        if not lay.direct:
            L.append(f"var<workgroup> sC: array<f32, {nsub * c.m0 * c.n0}>;")
    if emulate:
        # Half i of a tile array (the halves of a vec4<u32> in memory order).
        for arr, wide in dict([(arr_a, a_wide), (arr_b, b_wide)]).items():
            unit = f"{arr}[i / 8u]"
            if slotted:   # i counts halves from slot 0's start
                size = slot_a if arr == "sA" else slot_b
                unit = f"{arr}[i / {8 * size}u][(i / 8u) % {size}u]"
            body = f"bitcast<vec2<f16>>({unit}[(i % 8u) / 2u])[i % 2u]" if wide else f"{arr}[i]"
            L.append(f"fn {arr}_half(i: u32) -> f16 {{ return {body}; }}")
        # The half (index) of element (r, c) of matrix m in an array of `units` halves an element.
        L += ["fn emulated_element(m: vec3<u32>, units: u32, r: u32, c: u32) -> u32 {",
              "  return select((m.x + r * m.y) * units + c, (m.x + c * m.y) * units + r, m.z == col_major);",
              "}"]
        a_at = f"emulated_element(a, {8 if a_wide else 1}u, row, kk)"    # A's (m, k), B's (k, n)
        b_at = f"emulated_element(b, {8 if b_wide else 1}u, kk, col)"
        # A loop from the lane rather than over a constant count, and one call in a loop over the
        # products below rather than one a product: lavapipe unrolls constant counts and
        # compiles each inlined copy slowly (a small member took 37 s to compile rather than 2.5).
        lane_elements = [f"  for (var e = lane; e < {c.m0 * c.n0}u; e += {c.sg}u) {{",
                         f"    let row = e / {c.n0}u;", f"    let col = e % {c.n0}u;"]
        L += ["fn emulated_multiply_accumulate(a: LM, b: RM, acc: AM, lane: u32) -> AM {",
              "  var r = acc;"] + lane_elements + [
              f"    for (var kk = 0u; kk < {c.k0}u; kk++) {{",
              f"      r[e / {c.sg}u] += f32({arr_a}_half({a_at})) * f32({arr_b}_half({b_at}));",
              "    }",
              "  }",
              "  return r;",
              "}"]
        # The one store target (row_major): C (direct), sM (epi) or sC; f32 elements, four to a
        # 16-byte unit in an array of vec4.
        arr, ty = ("C", c_ty) if lay.direct else ("sM", "vec4<u32>") if combined else ("sC", "f32")
        value = f"acc[e / {c.sg}u]"
        if slotted and not lay.direct:   # the offset counts 16-byte units from slot 0's start
            arr = scratch_arr
            put = (f"let x = offset + row * stride + col / 4u; "
                   f"{arr}[x / {slot_c}u][x % {slot_c}u][col % 4u] = bitcast<u32>({value});")
        elif ty == "f32":
            put = f"{arr}[offset + row * stride + col] = {value};"
        elif ty in ("vec4<f32>", "vec4<u32>"):
            put = (f"{arr}[offset + row * stride + col / 4u][col % 4u] = "
                   + (f"bitcast<u32>({value});" if ty == "vec4<u32>" else f"{value};"))
        else:
            raise ValueError(f"sgmat: result matrices store f32 elements, not into an array of {ty}")
        L += [f"fn emulated_store_{arr}(offset: u32, acc: AM, stride: u32, lane: u32) {{"] + lane_elements + [
              f"    {put}", "  }", "}"]
    L.append(f"@compute @workgroup_size({nt})")
    L += entry_point(c.sg, emulate)
    L += [f"  let wrow = wg.y * {bm}u;",
          f"  let wcol = wg.x * {bn}u;",
          "  let z = wg.z;",
          "  let a_base = z * P.a_bs;",
          "  let b_base = z * P.b_bs;",
          "  let c_base = z * P.c_bs;",
          f"  let sgm = sgid % {c.wm}u;",
          f"  let sgn = sgid / {c.wm}u;"]
    # Tile origins in stored coordinates (row, column) and bounds.
    if lay.trans_a:
        a_args = dict(ld="P.m", r0="k0", c0="wrow", rmax="P.k", cmax="P.m")
    else:
        a_args = dict(ld="P.k", r0="wrow", c0="k0", rmax="P.m", cmax="P.k")
    if lay.trans_b:
        b_args = dict(ld="P.k", r0="wcol", c0="k0", rmax="P.n", cmax="P.k")
    else:
        b_args = dict(ld="P.n", r0="k0", c0="wcol", rmax="P.k", cmax="P.n")
    fa, sa = _tile_copy(arr_a, "A", a_rows, a_cols, lay.vec_a, nt, base="a_base", reg="ra", wide=a_wide,
                        split=split_a if slotted else None, **a_args)
    fb, sb = _tile_copy(arr_b, "B", b_rows, b_cols, lay.vec_b, nt, base="b_base", reg="rb", wide=b_wide,
                        split=split_b if slotted else None, **b_args)
    for u in range(-(-a_rows * a_cols // lay.vec_a // nt)):
        L.append(f"  var ra{u}: {a_ty};")
    for u in range(-(-b_rows * b_cols // lay.vec_b // nt)):
        L.append(f"  var rb{u}: {b_ty};")
    if emulate:   # acc{i}_{j} is acc[i * tn + j]
        L.append(f"  var acc: array<AM, {c.tm * c.tn}>;")
    else:
        L += [f"  var acc{i}_{j} = AM();" for i in range(c.tm) for j in range(c.tn)]

    def acc(i, j):
        return f"acc[{i * c.tn + j}]" if emulate else f"acc{i}_{j}"

    def block(lines, depth):
        return ["  " * depth + x for x in lines]

    def stash(stage_a, stage_b):
        return (["{", f"  let stage = {base_a}u + {stage_a};"] + ["  " + x for x in sa] + ["}",
                 "{", f"  let stage = {base_b}u + {stage_b};"] + ["  " + x for x in sb] + ["}"])

    a_pitch, b_pitch = a_cols + _PAD, b_cols + _PAD

    def load(name, ty, major, arr, off, pitch, wide):
        # every offset and pitch is a multiple of 8 halves, so exact in 16-byte units
        at, stride = (f"({off}) / 8u", f"{pitch // 8}u") if wide else (off, f"{pitch}u")
        if emulate:
            return f"      let {name} = {ty}({at}, {stride}, {major});"
        return f"      let {name} = subgroupMatrixLoad<{ty}, {major}>(&{arr}, {at}, {stride});"

    def slot_load(name, ty, major, arr, slot, size, off, pitch):
        # slotted: a literal offset into the subgroup's slot (emulated: counted from slot 0)
        if emulate:
            return f"      let {name} = {ty}({slot} * {size}u + {off // 8}u, {pitch // 8}u, {major});"
        return f"      let {name} = subgroupMatrixLoad<{ty}, {major}>(&{arr}[{slot}], {off // 8}u, {pitch // 8}u);"

    def store(arr, offset, acc, stride):
        if emulate:
            return f"emulated_store_{arr}({offset}, {acc}, {stride}, lane);"
        return f"subgroupMatrixStore<row_major>(&{arr}, {offset}, {acc}, {stride});"

    products = []   # one k step's products from the tiles at a_off, b_off
    for kk in range(0, tk, c.k0):
        products.append("    {")
        if slotted:   # offsets within the slot: A's sub-tile [tm m0][k] or [k][tm m0], B's [k][tn n0] or [tn n0][k]
            for i in range(c.tm):
                off, major = ((kk * pitch_a + i * c.m0, "col_major") if lay.trans_a else
                              (i * c.m0 * pitch_a + kk, "row_major"))
                products.append(slot_load(f"a{i}", "LM", major, "sA", "sgm", slot_a, off, pitch_a))
            for j in range(c.tn):
                off, major = ((j * c.n0 * pitch_b + kk, "col_major") if lay.trans_b else
                              (kk * pitch_b + j * c.n0, "row_major"))
                products.append(slot_load(f"b{j}", "RM", major, "sB", "sgn", slot_b, off, pitch_b))
        else:
            for i in range(c.tm):
                if lay.trans_a:   # sA[k][m]: element (r, c) of the left matrix at (kk + c) * pitch + m
                    off = f"a_off + {kk * a_pitch}u + sgm * {c.tm * c.m0}u + {i * c.m0}u"
                    products.append(load(f"a{i}", "LM", "col_major", arr_a, off, a_pitch, a_wide))
                else:             # sA[m][k]
                    off = f"a_off + (sgm * {c.tm * c.m0}u + {i * c.m0}u) * {a_pitch}u + {kk}u"
                    products.append(load(f"a{i}", "LM", "row_major", arr_a, off, a_pitch, a_wide))
            for j in range(c.tn):
                if lay.trans_b:   # sB[n][k]
                    off = f"b_off + (sgn * {c.tn * c.n0}u + {j * c.n0}u) * {b_pitch}u + {kk}u"
                    products.append(load(f"b{j}", "RM", "col_major", arr_b, off, b_pitch, b_wide))
                else:             # sB[k][n]
                    off = f"b_off + {kk * b_pitch}u + sgn * {c.tn * c.n0}u + {j * c.n0}u"
                    products.append(load(f"b{j}", "RM", "row_major", arr_b, off, b_pitch, b_wide))
        if emulate:   # one loop over the products (see emulated_multiply_accumulate)
            products += [f"      let lefts = array<LM, {c.tm}>({', '.join(f'a{i}' for i in range(c.tm))});",
                         f"      let rights = array<RM, {c.tn}>({', '.join(f'b{j}' for j in range(c.tn))});",
                         f"      for (var ij = 0u; ij < {c.tm * c.tn}u; ij++) {{",
                         f"        acc[ij] = emulated_multiply_accumulate(lefts[ij / {c.tn}u], rights[ij % {c.tn}u], acc[ij], lane);",
                         "      }"]
        else:
            products += [f"      acc{i}_{j} = subgroupMatrixMultiplyAccumulate(a{i}, b{j}, acc{i}_{j});"
                         for i in range(c.tm) for j in range(c.tn)]
        products.append("    }")

    if c.prefetch:    # (valid() holds it to one stage)
        # fetch step 0; then each step: stash, barrier, fetch the next step into registers (past
        # the last step the loads' bounds checks read nothing), multiply, barrier
        L += ["  var k0 = 0u;"] + block(fa + fb, 1) + [
              f"  let steps = (P.k + {tk - 1}u) / {tk}u;",
              "  for (var t = 0u; t < steps; t++) {"] + block(stash("0u", "0u"), 2) + [
              "    workgroupBarrier();",
              f"    k0 = (t + 1u) * {tk}u;"] + block(fa + fb, 2) + [
              f"    let a_off = {base_a}u;",
              f"    let b_off = {base_b}u;"] + products + ["    workgroupBarrier();", "  }"]
    elif c.single:    # fetch, stash, barrier, multiply, barrier: registers live only across the copy
        L += [f"  let steps = (P.k + {tk - 1}u) / {tk}u;",
              "  for (var t = 0u; t < steps; t++) {",
              f"    let k0 = t * {tk}u;"] + block(fa + fb, 2) + block(stash("0u", "0u"), 2) + [
              "    workgroupBarrier();",
              f"    let a_off = {base_a}u;",
              f"    let b_off = {base_b}u;"] + products + ["    workgroupBarrier();", "  }"]
    else:
        L += ["  var k0 = 0u;"] + block(fa + fb, 1) + block(stash("0u", "0u"), 1) + ["  workgroupBarrier();"]
        L += [f"  let steps = (P.k + {tk - 1}u) / {tk}u;",
              "  for (var t = 0u; t < steps; t++) {",
              "    let cur = t % 2u;",
              f"    k0 = (t + 1u) * {tk}u;",
              "    let more = t + 1u < steps;",
              "    if (more) {"] + block(fa + fb, 3) + ["    }",
              f"    let a_off = {base_a}u + cur * {a_size}u;",
              f"    let b_off = {base_b}u + cur * {b_size}u;"] + products
        L += ["    if (more) {"] + block(stash(f"(1u - cur) * {a_size}u", f"(1u - cur) * {b_size}u"), 3) + ["    }"]
        L += ["    workgroupBarrier();", "  }"]
    L.append(f"  let row0 = wrow + sgm * {c.tm * c.m0}u;")
    L.append(f"  let col0 = wcol + sgn * {c.tn * c.n0}u;")
    if lay.direct:
        for i in range(c.tm):
            for j in range(c.tn):
                L.append("  " + store("C", f"c_base + (row0 + {i * c.m0}u) * P.n + col0 + {j * c.n0}u", acc(i, j), "P.n"))
    elif epi_store:
        L.append("  let alpha = bitcast<f32>(P.alpha_bits);")
        if not slotted:
            L.append(f"  let scratch = sgid * {rounds_of * m_size}u;")
        else:   # the subgroup's slot and where its scratch starts there (emulated: from slot 0)
            slot, start = ("sgm", f"sgn * {rounds_of * m_size}u") if in_a else ("sgid", "0u")
            L.append(f"  let scratch = {start};")
            if emulate:
                L.append(f"  let scratch_flat = {slot} * {slot_c}u + scratch;")

        def scratch_store(q, matrix):   # result matrix q of a round into the subgroup's scratch
            if not slotted:
                return store("sM", f"scratch + {q * m_size}u", matrix, f"{m_pitch}u")
            if emulate:
                return f"emulated_store_{scratch_arr}(scratch_flat + {q * m_size}u, {matrix}, {m_pitch}u, lane);"
            return (f"subgroupMatrixStore<row_major>(&{scratch_arr}[{slot}], scratch + {q * m_size}u, "
                    f"{matrix}, {m_pitch}u);")

        def scratch_unit(at):            # 16-byte unit `at` of the subgroup's scratch
            return f"{scratch_arr}[{slot}][scratch + {at}]" if slotted else f"sM[scratch + {at}]"
        mats = [(i, j) for i in range(c.tm) for j in range(c.tn)]
        quads = c.m0 * (c.n0 // 4)              # 16-byte units of one result matrix
        per = -(-quads // c.sg)
        for r0 in range(0, len(mats), rounds_of):
            chunk = mats[r0:r0 + rounds_of]
            if r0:
                L.append("  workgroupBarrier();")
            for q, (i, j) in enumerate(chunk):
                L.append("  " + scratch_store(q, acc(i, j)))
            L.append("  workgroupBarrier();")
            for q, (i, j) in enumerate(chunk):
                for t in range(per):
                    L += ["  {", f"    let e = lane + {t * c.sg}u;"]
                    guard = f"e < {quads}u && " if quads % c.sg else ""
                    L += [f"    let rr = e / {c.n0 // 4}u;",
                          f"    let cq = e % {c.n0 // 4}u;",
                          f"    let r = row0 + {i * c.m0}u + rr;",
                          f"    let cc = col0 + {j * c.n0}u + cq * 4u;",
                          f"    if ({guard}r < P.m) {{",
                          f"      let v = bitcast<vec4<f32>>({scratch_unit(f'{q * m_size}u + rr * {m_pitch}u + cq')});",
                          "      let o = c_base + r * P.n + cc;"]
                    if vec_c:   # n % 4 == 0: a column cc < n (a multiple of 4) starts four inside the row
                        val = "alpha * v" + (" + vec4<f32>(Bias[cc / 4u])" if lay.bias else "")
                        L += [f"      if (cc < P.n) {{ C[o / 4u] = vec4<{lay.out}>({val}); }}", "    }", "  }"]
                        continue
                    for w, comp in enumerate("xyzw"):
                        val = f"alpha * v.{comp}" + (f" + f32(Bias[cc + {w}u])" if lay.bias else "")
                        L.append(f"      if (cc + {w}u < P.n) {{ C[o + {w}u] = {lay.out}({val}); }}")
                    L += ["    }", "  }"]
    else:
        tile = c.m0 * c.n0
        per = tile // c.sg
        L += ["  let alpha = bitcast<f32>(P.alpha_bits);",
              f"  let scratch = sgid * {tile}u;"]
        for i in range(c.tm):
            for j in range(c.tn):
                L += ["  " + store("sC", "scratch", acc(i, j), f"{c.n0}u"),
                      "  workgroupBarrier();",
                      f"  for (var q = 0u; q < {per}u; q++) {{",
                      f"    let e = lane * {per}u + q;",
                      f"    let r = row0 + {i * c.m0}u + e / {c.n0}u;",
                      f"    let cc = col0 + {j * c.n0}u + e % {c.n0}u;",
                      "    if (r < P.m && cc < P.n) {",
                      "      var v = alpha * sC[scratch + e];"]
                if lay.bias:
                    L.append("      v = v + f32(Bias[cc]);")
                L += [f"      C[c_base + r * P.n + cc] = {lay.out}(v);",
                      "    }",
                      "  }",
                      "  workgroupBarrier();"]
    L.append("}")
    return "\n".join(L) + "\n"


def launch(dev, config: SgConfig, problem: Problem, a, b, out, bias=None, emulate: bool = False) -> None:
    """Record C = alpha * op(A) @ op(B) (+ bias) of f16 Buffers a, b into `out` (f16 or f32)
    with `config` (emulate: its emulated form, see generate; for tests). Raises
    anygpu.GpuError when the kernel does not compile here."""
    lay = layout(config, problem, out.dtype, bias is not None)
    code = generate(config, lay, emulate)
    inputs = (a, b) if bias is None else (a, b, bias)
    kernel = dev.kernel("sgmat_" + config.name + ("_emulated" if emulate else ""), code, len(inputs), 1,
                        PARAM_FORMAT)
    grid = (-(-problem.n // config.bn), -(-problem.m // config.bm), problem.batch)
    dev.launch(kernel, inputs, (out,), problem.params(), grid)


def candidates(configs, sg: int, max_invocations: int = 1024, max_workgroup_bytes: int = 49152) -> list[SgConfig]:
    """Family members for the adapter's f16 x f16 -> f32 matrix configs `configs` (dicts with
    M, N, K) and subgroup size sg: a few subgroup grids, tiles per subgroup and k steps."""
    out = []
    shapes = [(2, 2, 2, 2, 32), (2, 4, 4, 2, 32), (4, 2, 2, 4, 32), (2, 2, 4, 4, 32), (2, 4, 4, 2, 64),
              (4, 2, 2, 4, 64), (2, 2, 4, 4, 64), (4, 4, 2, 2, 32), (2, 4, 2, 2, 32), (4, 2, 4, 2, 32),
              (2, 4, 4, 4, 16), (4, 2, 4, 4, 16), (2, 4, 4, 2, 16), (4, 4, 4, 2, 16),
              (4, 2, 2, 4, 64), (2, 4, 4, 2, 64), (2, 4, 4, 4, 32), (4, 2, 4, 4, 32), (4, 4, 4, 2, 32)]
    for cfg in configs:
        m0, n0, k0 = int(cfg["M"]), int(cfg["N"]), int(cfg["K"])
        for wm, wn, tm, tn, tk in shapes:
            for wide, epi, single, slots, prefetch in (
                    (False, False, False, False, False), (True, False, False, False, False),
                    (True, True, False, False, False), (True, True, True, False, False),
                    (True, True, True, True, False), (True, True, True, True, True)):
                c = SgConfig(m0, n0, k0, sg, wm, wn, tm, tn, tk, wide, epi, single, slots, prefetch)
                if c.valid(max_invocations, max_workgroup_bytes) and c not in out:
                    out.append(c)
    return out


# Measured on the H200 (benchmarks/sgmat_sweep.py, docs/BENCHMARKS.md): the best of the family
# on 4096^3 and on nanoGPT's products, in order of preference; the first that this adapter's
# configs, subgroup size and limits allow is the default. Session 13: one stage of workgroup
# memory without register prefetch (_s) beat the two-stage form by 15-45%. Session 17: with
# Dawn's robustness on (as anygpu runs), matrix loads at literal offsets (_c) gave 4096^3
# 140 -> 167 TFLOP/s (w4x2_t2x4_k64) and nanoGPT's qkv / proj / dX 111 / 114 / 131 -> 134 / 139 /
# 158; w2x4_t4x2_k64_v_e_s_c ran proj 209 and fc 143 in the same sweep.
PREFERRED = ("sg16x16x16s32_w2x4_t4x2_k64_v_e_s_c", "sg16x16x16s32_w4x2_t2x4_k64_v_e_s_c",
             "sg16x16x16s32_w4x2_t2x4_k64_v_e_s", "sg16x16x16s32_w2x4_t4x2_k32_v_e_s",
             "sg16x16x16s32_w2x2_t4x4_k32_v_e", "sg16x16x16s32_w2x4_t4x2_k32", "sg16x16x16s32_w4x2_t2x4_k32",
             "sg16x16x16s32_w2x4_t4x4_k16", "sg16x16x16s32_w2x2_t2x2_k32")


def f16_configs(dev) -> tuple[list[dict], int]:
    """The adapter's checked f16 x f16 -> f32 subgroup-matrix configs and their one subgroup
    size (([], 0) where there are none, or the subgroup size varies)."""
    found = [c for c in getattr(dev, "matrix_configs", None) or []
             if c.get("component_type") == "f16" and c.get("result_type") == "f32" and c.get("checked")]
    sizes = {(int(c.get("min_subgroup_size") or 0), int(c.get("max_subgroup_size") or 0)) for c in found}
    if len(sizes) != 1:
        return [], 0
    lo, hi = sizes.pop()
    return (found, hi) if lo == hi and hi > 0 else ([], 0)


def allowed(dev) -> list[SgConfig]:
    """The family members this adapter's f16 matrix configs, subgroup size and limits allow
    (memoised on the device while its configs and limits stay; [] without matrix units)."""
    limits = getattr(dev, "limits", {}) or {}
    threads = int(limits.get("max-compute-invocations-per-workgroup", 256))
    storage = int(limits.get("max-compute-workgroup-storage-size", 16384))
    stamp = (id(getattr(dev, "matrix_configs", None)), threads, storage)
    memo = getattr(dev, "_sgmat_allowed", None)
    if memo is None or memo[0] != stamp:
        configs, sg = f16_configs(dev)
        memo = dev._sgmat_allowed = (stamp, candidates(configs, sg, threads, storage) if configs else [])
    return memo[1]


def preferred(members: list[SgConfig]) -> SgConfig | None:
    """The default among `members`: PREFERRED's first that is one, else the first."""
    by_name = {c.name: c for c in members}
    return next((by_name[n] for n in PREFERRED if n in by_name), members[0] if members else None)


def _off() -> bool:
    return os.environ.get("ANYGPU_MATRIX_UNITS", "1").strip().lower() in ("0", "false", "off", "no")


def choose(dev, problem: Problem | None = None, out: str = "f16", bias: bool = False) -> SgConfig | None:
    """The family member to run `problem` with (result type `out`, with a bias or not) on
    `dev`: the tuner's pick (ops/sgmat_tune.py). Without a problem: the device's default
    member. None: no matrix units, or they failed here. ANYGPU_SGMAT_CONFIG=<name> runs every
    product with that member; ANYGPU_MATRIX_UNITS=0 turns the family off."""
    default = getattr(dev, "_sgmat_choice", False)
    if default is False:
        default = None
        members = allowed(dev)
        if members and not _off():
            wanted = os.environ.get("ANYGPU_SGMAT_CONFIG", "").strip()
            if wanted:
                default = SgConfig.parse(wanted)
                if default not in members:
                    raise ValueError(f"ANYGPU_SGMAT_CONFIG: {wanted} is not one of this adapter's "
                                     f"{len(members)} family members ({', '.join(c.name for c in members[:6])}, ...)")
            else:
                default = preferred(members)
        dev._sgmat_choice = default
    if default is None or problem is None or os.environ.get("ANYGPU_SGMAT_CONFIG", "").strip():
        return default
    from . import sgmat_tune   # not at import: benchmarks load this module without the runtime
    return sgmat_tune.choose(dev, problem, out, bias)


def matmul(dev, problem: Problem, a, b, out: str = "f16", bias=None):
    """C = alpha * op(A) @ op(B) (+ bias) of f16 Buffers on matrix units, launched now (a new
    Buffer of type `out`), with the member `choose` gives; None where the device has no
    matrix units (or they are off). A tuned member that fails to compile or run is dropped
    for the default member; a default that fails turns the family off (`forget`).

    A product with few result tiles and a long k (a weight gradient, dY^T @ X) runs as
    `split_k` slices in parallel, f32 partial sums that one more launch adds up."""
    default = choose(dev)
    if default is None:
        return None
    splits = split_k(problem, default)
    if splits == 1:
        result = dev.empty(problem.batch * problem.m * problem.n, out)
        return result if _launch_chosen(dev, problem, a, b, result, bias) else None
    m, n = problem.m, problem.n
    sliced = Problem(splits, m, n, problem.k // splits, True, False, True, True, problem.alpha)
    partial = dev.empty(splits * m * n, "f32")
    if not _launch_chosen(dev, sliced, a, b, partial, None):
        return None
    return sum_splits(dev, partial, splits, m * n, out, bias, n)


def sum_splits(dev, partial, splits: int, n: int, out: str, bias=None, cols: int = 1):
    """A new `out` Buffer of n elements: the sum of the f32 Buffer `partial`'s `splits` runs
    of n (+ bias[i % cols]), one launch. The k slices of split products here and of
    conv_sgmat's weight gradients."""
    result = dev.empty(n, out)
    inputs = [partial] if bias is None else [partial, bias]
    kernel = dev.kernel(f"sgmat_split_sum_{out}" + ("_bias" if bias is not None else ""),
                        split_sum_source(out, bias is not None), len(inputs), 1, "III")
    dev.launch(kernel, inputs, [result], (n, splits, cols), dev.grid(-(-n // 256)))
    return result


def _launch_chosen(dev, problem: Problem, a, b, result, bias) -> bool:
    """Launch `problem` into `result` with the member `choose` gives for it; False when the
    family failed here (turned off)."""
    from ..runtime import GpuError
    from . import sgmat_tune
    config = choose(dev, problem, result.dtype, bias is not None)
    if config is None:
        return False
    while True:
        try:
            launch(dev, config, problem, a, b, result, bias)
            return True
        except GpuError as exc:
            default = choose(dev)
            if default is None or config == default:
                forget(dev, str(exc))
                return False
            sgmat_tune.forget(dev, config, str(exc))
            config = default


# Split-k: a product whose result has fewer tiles than this many workgroups could fill runs in
# k slices (at least _SPLIT_MIN_K deep each, at most _SPLIT_MAX_PARTIAL partial sums in all).
# nanoGPT's weight gradients (1536x384 from k = 16384: 36 tiles of 128x128 for 132 SMs) ran at
# 17-57 TFLOP/s whole (H200, benchmarks/sgmat_sweep.py).
_SPLIT_WORKGROUPS = 512
_SPLIT_MIN_K = 512
_SPLIT_MAX_PARTIAL = 1 << 24


def split_k(problem: Problem, config: SgConfig) -> int:
    """How many k slices `problem` runs in (a power of two dividing k; 1: whole). Only A^T @ B
    unbatched, where slice z is batch z of the same kernel: A^T's and B's rows are k, so a
    slice starts z * k/splits rows further in both (the batch strides)."""
    p = problem
    if p.batch != 1 or not p.trans_a or p.trans_b or os.environ.get("ANYGPU_SGMAT_SPLIT_K", "1") == "0":
        return 1
    tiles = -(-p.m // config.bm) * -(-p.n // config.bn)
    want = min(-(-_SPLIT_WORKGROUPS // tiles), p.k // _SPLIT_MIN_K, _SPLIT_MAX_PARTIAL // max(p.m * p.n, 1))
    splits = 1
    while splits * 2 <= want and p.k % (splits * 2) == 0:
        splits *= 2
    return splits


@functools.lru_cache(maxsize=None)
def split_sum_source(out: str, bias: bool) -> str:
    """out[i] = sum over the splits of partial[s * n + i] (+ bias[i % cols]), one thread per
    element (params: n, splits, cols)."""
    lines = ["enable f16;",
             "struct Params { n: u32, splits: u32, cols: u32 }",
             "@group(0) @binding(0) var<uniform> P: Params;",
             "@group(0) @binding(1) var<storage, read> partial: array<f32>;"]
    if bias:
        lines.append("@group(0) @binding(2) var<storage, read> Bias: array<f16>;")
    lines += [f"@group(0) @binding({3 if bias else 2}) var<storage, read_write> C: array<{out}>;",
              "@compute @workgroup_size(256)",
              "fn main(@builtin(global_invocation_id) gid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>) {",
              "  let i = gid.x + gid.y * nwg.x * 256u;",
              "  if (i >= P.n) { return; }",
              "  var acc = 0.0;",
              "  for (var s = 0u; s < P.splits; s++) { acc += partial[s * P.n + i]; }"]
    if bias:
        lines.append("  acc += f32(Bias[i % P.cols]);")
    lines += [f"  C[i] = {out}(acc);", "}"]
    return "\n".join(lines) + "\n"


def forget(dev, reason: str) -> None:
    """Stop using matrix units on `dev` (a kernel did not compile or run): products go back
    to the register-blocked family; say so once."""
    dev._sgmat_choice = None
    warnings.warn(f"anygpu: matrix-unit matmul disabled on this device: {reason}", RuntimeWarning, stacklevel=4)
