"""The implicit-GEMM convolution kernels, generated from a few tile parameters.

kernels/conv_gemm.wgsl is the GEMM skeleton; a kind file (kernels/conv2d.wgsl,
conv_transpose2d.wgsl, conv2d_grad_weight.wgsl) supplies the index maths of one
convolution. This module picks the tiles for a problem's shape and writes the parts
that are unrolled for them: named vec4 accumulators, the full kk loop of multiply-adds
and the stores. Loops over function-scope arrays spill to memory on several drivers,
and lavapipe runs the unrolled multiply-adds about twice as fast as the looped ones.
The tile loads stay loops: unrolled, they made lavapipe's first compile of a kernel
several times slower (seconds per variant) for no measurable speed.

conv2d of stride 1 and dilation 1 has a second form (`DirectTiles`, kernels/conv_direct.wgsl):
the input patch of a block of output rows is staged once per step of input channels and
serves every tap from registers, instead of being gathered again for each of the k = (ic, r, s).

conv2d (both forms) and conv_transpose2d may store through an elementwise epilogue
(matmul_gen.Epilogue, built by ops/fusion.py from the ops that read the result): the value
stored is the sum plus bias as without one, handed to the epilogue's store1; its extra inputs
are bound from binding 4, the output after them, its other outputs last; its zero word and
scalars follow the kind's parameters padded to 4 words (`params`), within the 256-byte slot.
"""

from __future__ import annotations

import functools
import math
import re
from dataclasses import dataclass

from ..runtime import Params, load_shader
from .matmul_gen import Epilogue
from .thread_grid import ThreadGrid, outer_product_lines

KINDS = ("conv2d", "conv_transpose2d", "conv2d_grad_weight")

# The uniform parameters of each kind: the WGSL struct and the launch's format both come from here.
_GEOMETRY = ("batch", "in_c", "in_h", "in_w", "out_c", "out_h", "out_w", "groups", "kh", "kw",
             "stride_h", "stride_w", "pad_h", "pad_w", "dil_h", "dil_w",
             "has_bias", "tiles_n", "tiles_m", "splits", "k_per_split")
_PHASE = ("phase_h", "phase_w", "phase_rows", "phase_cols", "tap_r0", "tap_r_step", "taps_r",
          "tap_s0", "tap_s_step", "taps_s")
PARAMS = {
    "conv2d": Params(*(f"{name}: u32" for name in _GEOMETRY)),
    "conv2d_grad_weight": Params(*(f"{name}: u32" for name in _GEOMETRY)),
    "conv_transpose2d": Params(*(f"{name}: u32" for name in _GEOMETRY + _PHASE)),
    "conv2d_direct": Params(*(f"{name}: u32" for name in _GEOMETRY + ("tiles_w", "tiles_h"))),
}
_LANES = "xyzw"
# The kinds whose output may go through an elementwise epilogue (matmul_gen.Epilogue): the
# output binding then follows the epilogue's extra inputs, the other outputs after it.
_OUTPUT_BINDING = {"conv2d": 4, "conv_transpose2d": 4, "conv2d_direct": 4}
UNIFORM_WORDS = 64  # the 256-byte uniform slot of one launch


def params(kind: str, epilogue: Epilogue | None = None) -> Params:
    """The parameter block of `kind` (PARAMS, or conv2d_direct), followed for an epilogue
    by padding to 4 words and the epilogue's fields (its zero word and scalars)."""
    base = PARAMS[kind]
    if epilogue is None:
        return base
    return _with_epilogue(kind, epilogue)


@functools.lru_cache(maxsize=None)
def _with_epilogue(kind: str, epilogue: Epilogue) -> Params:
    fields = list(PARAMS[kind].names)
    pads = -len(fields) % 4
    return Params(*(f"{name}: u32" for name in fields), *(f"e_fill{k}: u32" for k in range(pads)),
                  *epilogue.param_fields())


def epilogue_room(kind: str) -> int:
    """How many epilogue scalars fit the uniform slot after `kind`'s parameters."""
    return UNIFORM_WORDS - (-(-len(PARAMS[kind].names) // 4) * 4) - 4


def epilogue_subs(kind: str, epilogue: Epilogue | None) -> dict:
    """The OUT_BINDING and EPILOGUE placeholders of a kind file: the output after the
    epilogue's extra inputs, and the epilogue's bindings and store1 function (writing `out`)."""
    first = _OUTPUT_BINDING[kind]
    if epilogue is None:
        return {"OUT_BINDING": first, "EPILOGUE": ""}
    return {"OUT_BINDING": first + epilogue.n_extra,
            "EPILOGUE": epilogue.wgsl("f32", "f32", False, first=first, target="out")}


@dataclass(frozen=True)
class ConvTiles(ThreadGrid):
    """tile_m x tile_n outputs per workgroup, tile_k-deep steps, rows x cols outputs
    per thread (so (tile_m/rows) x (tile_n/cols) threads)."""

    tile_m: int
    tile_n: int
    rows: int
    cols: int = 8
    tile_k: int = 8

    @property
    def name(self) -> str:
        return f"{self.tile_m}x{self.tile_n}x{self.tile_k}_{self.rows}x{self.cols}"


# Cost of staging one value of a tile (gather, bounds checks, table reads, its share of
# the barriers) in multiply-adds: fitted to conv2d and conv2d_grad_weight timings of
# every tile pair on lavapipe (time ~ padding * (1 + _STAGE_COST*(1/tile_m + 1/tile_n))).
# Only used to rank tiles.
_STAGE_COST = 48.0
_TILE_M_CHOICES = (4, 8, 16, 32, 64)
_TILE_N_CHOICES = (32, 64, 128)


def choose_tiles(rows: int, cols: int) -> ConvTiles:
    """Tiles for a GEMM of `rows` output channels (per group) by `cols` columns.

    Per multiply-add that counts, a tile costs its padding (rounded-up rows and columns
    are computed and thrown away) times 1 + _STAGE_COST * (1/tile_m + 1/tile_n) (each
    k step stages tile_m + tile_n values for tile_m * tile_n products). The cheapest
    wins, the larger tile on a tie: 3 channels get 4-row tiles, not 64, and a
    weight gradient of 9 columns gets 32-column tiles, not 128."""
    def cost(tile_m: int, tile_n: int) -> float:
        padding = (-(-rows // tile_m) * tile_m / rows) * (-(-cols // tile_n) * tile_n / cols)
        return padding * (1.0 + _STAGE_COST * (1.0 / tile_m + 1.0 / tile_n))

    tile_m, tile_n = min(((m, n) for m in _TILE_M_CHOICES for n in _TILE_N_CHOICES),
                         key=lambda mn: (cost(*mn), -mn[0] * mn[1]))
    return ConvTiles(tile_m, tile_n, rows=4 if tile_m == 4 else 8)


def _indent(lines: list[str], depth: int) -> str:
    return "\n".join("    " * depth + line for line in lines)


def _declare(t: ConvTiles) -> list[str]:
    return [f"var acc_{i}_{r}_{j} = vec4<f32>(0.0);"
            for i in range(t.rows // 4) for r in range(4) for j in range(t.cols // 4)]


def _compute(t: ConvTiles) -> list[str]:
    return outer_product_lines(t, t.tile_k, lambda kk, i: f"a_tile[{kk}u * (TILE_M / 4u) + ty + {i * t.threads_y}u]",
                               lambda kk, j: f"b_tile[{kk}u * (TILE_N / 4u) + tx + {j * t.threads_x}u]")


def _store(t: ConvTiles, epilogue: Epilogue | None = None) -> list[str]:
    """Write every accumulator lane inside the output (through the epilogue's store1 when
    there is one). Per-row values (bias, offset, bounds) are computed once, per-column ones
    (output_index) once per column."""
    lines = []
    for i in range(t.rows // 4):
        for r in range(4):
            name = f"{i}_{r}"
            lines += [f"let row_{name} = row0 + 4u * (ty + {i * t.threads_y}u) + {r}u;",
                      f"let row_ok_{name} = row_{name} < m;",
                      f"let bias_{name} = select(0.0, row_bias(g, row_{name}), row_ok_{name});",
                      f"let offset_{name} = row_{name} * stride;"]
    for j in range(t.cols // 4):
        for q, lane in enumerate(_LANES):
            lines += ["{", f"    let col = col0 + 4u * (tx + {j * t.threads_x}u) + {q}u;", "    if (col < n) {",
                      "        let o = output_index(g, split, col);"]
            for i in range(t.rows // 4):
                for r in range(4):
                    name = f"{i}_{r}"
                    value, at = f"acc_{name}_{j}.{lane} + bias_{name}", f"o + offset_{name}"
                    store = f"out[{at}] = {value};" if epilogue is None else f"store1({value}, {at}, 0u);"
                    lines.append(f"        if (row_ok_{name}) {{ {store} }}")
            lines += ["    }", "}"]
    return lines


@functools.lru_cache(maxsize=None)
def generate(kind: str, tiles: ConvTiles, epilogue: Epilogue | None = None) -> str:
    """The WGSL source of convolution `kind` (one of KINDS) blocked as `tiles`, storing
    through `epilogue` (conv2d and conv_transpose2d; None: the sum plus bias as it is)."""
    if kind not in KINDS:
        raise ValueError(f"conv kernel kind must be one of {KINDS}, got {kind!r}")
    subs = {}
    if kind in _OUTPUT_BINDING:
        subs = epilogue_subs(kind, epilogue)
    elif epilogue is not None:
        raise ValueError(f"conv kernel kind {kind} takes no epilogue")
    return load_shader(
        "conv_gemm.wgsl",
        KIND=load_shader(f"{kind}.wgsl", **params(kind, epilogue).subs(), **subs),
        TILE_M=tiles.tile_m, TILE_N=tiles.tile_n, TILE_K=tiles.tile_k,
        THREADS_X=tiles.threads_x, THREADS_Y=tiles.threads_y,
        DECLARE=_indent(_declare(tiles), 1),
        COMPUTE=_indent(_compute(tiles), 2),
        STORE=_indent(_store(tiles, epilogue), 1),
    )


# ---------------------------------------------------------------------------- direct form

_DIRECT_NAME = re.compile(r"^d(\d+)x(\d+)_(\d+)x(\d+)x(\d+)_k(\d+)$")


@dataclass(frozen=True)
class DirectTiles:
    """Blocking of the direct conv2d (stride 1, dilation 1; kernels/conv_direct.wgsl):
    tm output channels per workgroup, rm per thread (a multiple of 4); per thread cw
    output columns (a multiple of 4) of one output row; tx threads across and th output
    rows per workgroup; ck input channels staged per step."""

    tm: int
    rm: int
    cw: int
    tx: int
    th: int
    ck: int

    @property
    def name(self) -> str:
        return f"d{self.tm}x{self.rm}_{self.cw}x{self.tx}x{self.th}_k{self.ck}"

    @classmethod
    def parse(cls, name: str) -> "DirectTiles":
        found = _DIRECT_NAME.match(name)
        if not found:
            raise ValueError(f"direct conv tiles: cannot parse {name!r}; expected like 'd64x8_8x7x2_k4'")
        return cls(*(int(v) for v in found.groups()))

    @property
    def threads(self) -> int:
        return self.tx * self.th * (self.tm // self.rm)

    def workgroup_bytes(self, kh: int, kw: int) -> int:
        patch = self.ck * (self.th + kh - 1) * (self.tx * self.cw + kw - 1)
        return 4 * (patch + self.ck * kh * kw * self.tm)

    def grid(self, m: int, out_h: int, out_w: int) -> tuple[int, int, int]:
        """(tiles_w, tiles_h, tiles_m) of a layer with m output channels per group."""
        return -(-out_w // (self.tx * self.cw)), -(-out_h // self.th), -(-m // self.tm)


def direct_applies(stride, dilation) -> bool:
    return tuple(stride) == (1, 1) and tuple(dilation) == (1, 1)


def _direct_compute(t: DirectTiles, kh: int, kw: int) -> list[str]:
    lines = []
    span = t.cw + kw - 1
    for r in range(kh):
        lines.append("{")
        lines.append(f"    let prow = (c * PH + py + {r}u) * PW + px * CW;")
        lines += [f"    let p{j} = tile_in[prow + {j}u];" for j in range(span)]
        for s in range(kw):
            for i in range(t.rm // 4):
                lines.append(f"    let w{s}_{i} = wts[((c * KH + {r}u) * KW + {s}u) * (TM / 4u) + cgp * (RM / 4u) + {i}u];")
            for i in range(t.rm // 4):
                for lane_index, lane in enumerate(_LANES):
                    for q in range(t.cw // 4):
                        acc = f"acc_{4 * i + lane_index}_{q}"
                        cols = ", ".join(f"p{s + 4 * q + e}" for e in range(4))
                        lines.append(f"    {acc} = fma(vec4<f32>(w{s}_{i}.{lane}), vec4<f32>({cols}), {acc});")
        lines.append("}")
    return lines


def _direct_store(t: DirectTiles, epilogue: Epilogue | None = None) -> list[str]:
    lines = []
    for k in range(t.rm):
        lines += [f"let orow{k} = row0 + cgp * RM + {k}u;", f"if (orow{k} < m) {{",
                  f"    let b = select(0.0, bias[g * m + orow{k}], P.has_bias != 0u);",
                  f"    let o = (n * P.out_c + g * m + orow{k}) * out_hw + oh * P.out_w;"]
        for q in range(t.cw // 4):
            for e, lane in enumerate(_LANES):
                value, at = f"acc_{k}_{q}.{lane} + b", f"o + col + {4 * q + e}u"
                store = f"out[{at}] = {value};" if epilogue is None else f"store1({value}, {at}, 0u);"
                lines.append(f"    if (col + {4 * q + e}u < P.out_w) {{ {store} }}")
        lines.append("}")
    return lines


@functools.lru_cache(maxsize=None)
def generate_direct(tiles: DirectTiles, kh: int, kw: int, epilogue: Epilogue | None = None) -> str:
    """The WGSL of the direct conv2d blocked as `tiles` for a kh x kw kernel, storing
    through `epilogue` (None: the sum plus bias as it is)."""
    if tiles.rm % 4 or tiles.cw % 4 or tiles.tm % tiles.rm:
        raise ValueError(f"direct conv tiles {tiles.name}: rm and cw must be multiples of 4 dividing tm")
    declare = [f"var acc_{k}_{q} = vec4<f32>(0.0);" for k in range(tiles.rm) for q in range(tiles.cw // 4)]
    return load_shader(
        "conv_direct.wgsl", **params("conv2d_direct", epilogue).subs(), **epilogue_subs("conv2d_direct", epilogue),
        TM=tiles.tm, RM=tiles.rm, CW=tiles.cw, TX=tiles.tx, TH=tiles.th, CK=tiles.ck, KH=kh, KW=kw,
        DECLARE=_indent(declare, 1), COMPUTE=_indent(_direct_compute(tiles, kh, kw), 3),
        STORE=_indent(_direct_store(tiles, epilogue), 1))


def output_phases(out_h: int, out_w: int, kh: int, kw: int, stride, padding, dilation):
    """A transposed convolution's output phases (oh mod stride_h, ow mod stride_w), each one
    launch of ops/conv.py's and ops/conv_sgmat.py's kernels: (phase_h, phase_w, phase_rows,
    phase_cols, taps_h, taps_w), the taps (first, step, count) as `phase_taps` gives them."""
    for phase_h in range(min(stride[0], out_h)):
        phase_rows = -(-(out_h - phase_h) // stride[0])
        taps_h = phase_taps(phase_h, kh, stride[0], padding[0], dilation[0])
        for phase_w in range(min(stride[1], out_w)):
            phase_cols = -(-(out_w - phase_w) // stride[1])
            taps_w = phase_taps(phase_w, kw, stride[1], padding[1], dilation[1])
            yield phase_h, phase_w, phase_rows, phase_cols, taps_h, taps_w


def phase_taps(phase: int, kernel: int, stride: int, padding: int, dilation: int) -> tuple[int, int, int]:
    """The taps r (< kernel) that reach an input row from output rows oh = phase (mod stride):
    those with r*dilation = phase + padding (mod stride). They form a progression
    first + i*step, i < count; returns (first, step, count)."""
    taps = [r for r in range(kernel) if (phase + padding - r * dilation) % stride == 0]
    step = stride // math.gcd(stride, dilation)
    return (taps[0] if taps else 0), step, len(taps)
