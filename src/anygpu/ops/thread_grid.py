"""The thread grid of a register-blocked tile, shared by the matmul family
(ops/matmul_gen.MatmulConfig) and the implicit-GEMM convolutions (ops/conv_gen.ConvTiles)."""

from __future__ import annotations

from typing import Callable


class ThreadGrid:
    """A tile_m x tile_n block of outputs per workgroup with rows x cols outputs per
    thread: (tile_n / cols) x (tile_m / rows) threads. Subclasses (dataclasses) define
    the four fields."""

    tile_m: int
    tile_n: int
    rows: int
    cols: int

    @property
    def threads_x(self) -> int:
        return self.tile_n // self.cols

    @property
    def threads_y(self) -> int:
        return self.tile_m // self.rows

    @property
    def threads(self) -> int:
        return self.threads_x * self.threads_y


def outer_product_lines(grid: ThreadGrid, tile_k: int, a_load: Callable[[int, int], str],
                        b_load: Callable[[int, int], str]) -> list[str]:
    """WGSL of the unrolled register outer product over one tile_k slice: for each kk, the
    thread loads rows/4 vec4 of A (`a_load(kk, i)`) and cols/4 vec4 of B (`b_load(kk, j)`,
    WGSL expressions) and adds a_i[lane] * b_j into acc_i_lane_j."""
    lines = []
    for kk in range(tile_k):
        lines.append("{")
        lines += [f"    let a{i} = {a_load(kk, i)};" for i in range(grid.rows // 4)]
        lines += [f"    let b{j} = {b_load(kk, j)};" for j in range(grid.cols // 4)]
        for i in range(grid.rows // 4):
            for r, lane in enumerate("xyzw"):
                for j in range(grid.cols // 4):
                    acc = f"acc_{i}_{r}_{j}"
                    lines.append(f"    {acc} = fma(vec4<f32>(a{i}.{lane}), b{j}, {acc});")
        lines.append("}")
    return lines
