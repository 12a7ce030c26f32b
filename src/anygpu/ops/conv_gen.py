"""The implicit-GEMM convolution kernels, generated from a few tile parameters.

kernels/conv_gemm.wgsl is the GEMM skeleton; a kind file (kernels/conv2d.wgsl,
conv_transpose2d.wgsl, conv2d_grad_weight.wgsl) supplies the index maths of one
convolution. This module picks the tiles for a problem's shape and writes the parts
that are unrolled for them: named vec4 accumulators, the full kk loop, the tile loads
and the stores (loops over function-scope arrays spill to memory on several drivers,
and lavapipe runs the unrolled form at about twice the speed of the looped one).
"""

from __future__ import annotations

import functools
from dataclasses import dataclass

from ..runtime import load_shader

KINDS = ("conv2d", "conv_transpose2d", "conv2d_grad_weight")
_LANES = "xyzw"


@dataclass(frozen=True)
class ConvTiles:
    """tile_m x tile_n outputs per workgroup, tile_k-deep steps, rows x cols outputs
    per thread (so (tile_m/rows) x (tile_n/cols) threads)."""

    tile_m: int
    tile_n: int
    rows: int
    cols: int = 8
    tile_k: int = 8

    @property
    def threads_x(self) -> int:
        return self.tile_n // self.cols

    @property
    def threads_y(self) -> int:
        return self.tile_m // self.rows

    @property
    def threads(self) -> int:
        return self.threads_x * self.threads_y

    @property
    def b_slots(self) -> int:
        """B columns each thread gathers per k step (the thread count divides tile_n)."""
        return self.tile_n // self.threads


def choose_tiles(rows: int, cols: int) -> ConvTiles:
    """Tiles for a GEMM of `rows` output channels (per group) by `cols` columns: the
    smallest tile that covers each (up to 64 x 128), so a layer of 3 or 16 channels
    does not pay for 64-row tiles of zeros."""
    tile_m = next((t for t in (4, 8, 16, 32) if rows <= t), 64)
    tile_n = next((t for t in (32, 64) if cols <= t), 128)
    return ConvTiles(tile_m, tile_n, rows=4 if tile_m == 4 else 8)


def _indent(lines: list[str], depth: int) -> str:
    return "\n".join("    " * depth + line for line in lines)


def _columns(t: ConvTiles) -> list[str]:
    lines = []
    for s in range(t.b_slots):
        lines += [f"let column_{s} = column(g, col0 + tid + {s * t.threads}u);",
                  f"let b_vec_{s} = (tid + {s * t.threads}u) >> 2u;",
                  f"let b_lane_{s} = (tid + {s * t.threads}u) & 3u;"]
    return lines


def _declare(t: ConvTiles) -> list[str]:
    return [f"var acc_{i}_{r}_{j} = vec4<f32>(0.0);"
            for i in range(t.rows // 4) for r in range(4) for j in range(t.cols // 4)]


def _load_a(t: ConvTiles) -> list[str]:
    """Stage A[row0 + i, k0 + kk] for the tile, neighbouring threads along k."""
    total = t.tile_k * t.tile_m
    lines = []
    for s in range(-(-total // t.threads)):
        body = ["let kk = e % TILE_K;",
                "let i = e / TILE_K;",
                "var value = 0.0;",
                "if (row0 + i < m && k0 + kk < k_end) { value = fetch_a(g, row0 + i, k0 + kk, kk); }",
                "a_tile[kk * (TILE_M / 4u) + (i >> 2u)][i & 3u] = value;"]
        if (s + 1) * t.threads > total:  # last, partial round
            body = ["if (e < TILE_K * TILE_M) {"] + ["    " + line for line in body] + ["}"]
        lines += ["{", f"    let e = tid + {s * t.threads}u;"] + ["    " + line for line in body] + ["}"]
    return lines


def _load_b(t: ConvTiles) -> list[str]:
    """Gather B[k0 + kk, col] for this thread's columns at every kk of the step."""
    return [f"b_tile[{kk}u * (TILE_N / 4u) + b_vec_{s}][b_lane_{s}] = fetch_b(column_{s}, {kk}u);"
            for kk in range(t.tile_k) for s in range(t.b_slots)]


def _compute(t: ConvTiles) -> list[str]:
    lines = []
    for kk in range(t.tile_k):
        lines.append("{")
        for i in range(t.rows // 4):
            lines.append(f"    let a{i} = a_tile[{kk}u * (TILE_M / 4u) + ty + {i * t.threads_y}u];")
        for j in range(t.cols // 4):
            lines.append(f"    let b{j} = b_tile[{kk}u * (TILE_N / 4u) + tx + {j * t.threads_x}u];")
        for i in range(t.rows // 4):
            for r, lane in enumerate(_LANES):
                for j in range(t.cols // 4):
                    acc = f"acc_{i}_{r}_{j}"
                    lines.append(f"    {acc} = fma(vec4<f32>(a{i}.{lane}), b{j}, {acc});")
        lines.append("}")
    return lines


def _store(t: ConvTiles) -> list[str]:
    """Write every accumulator lane inside the output, one output_index per column."""
    lines = []
    for j in range(t.cols // 4):
        for q, lane in enumerate(_LANES):
            body = ["let o = output_index(g, split, col);"]
            for i in range(t.rows // 4):
                for r in range(4):
                    body += ["{",
                             f"    let row = row0 + 4u * (ty + {i * t.threads_y}u) + {r}u;",
                             f"    if (row < m) {{ out[o + row * stride] = acc_{i}_{r}_{j}.{lane} + row_bias(g, row); }}",
                             "}"]
            lines += ["{", f"    let col = col0 + 4u * (tx + {j * t.threads_x}u) + {q}u;", "    if (col < n) {"]
            lines += ["        " + line for line in body] + ["    }", "}"]
    return lines


@functools.lru_cache(maxsize=None)
def generate(kind: str, tiles: ConvTiles) -> str:
    """The WGSL source of convolution `kind` (one of KINDS) blocked as `tiles`."""
    if kind not in KINDS:
        raise ValueError(f"conv kernel kind must be one of {KINDS}, got {kind!r}")
    return load_shader(
        "conv_gemm.wgsl",
        KIND=load_shader(f"{kind}.wgsl"),
        TILE_M=tiles.tile_m, TILE_N=tiles.tile_n, TILE_K=tiles.tile_k,
        THREADS_X=tiles.threads_x, THREADS_Y=tiles.threads_y,
        DECLARE=_indent(_declare(tiles), 1),
        COMPUTE=_indent(_compute(tiles), 2),
        STORE=_indent(_store(tiles), 1),
    )
