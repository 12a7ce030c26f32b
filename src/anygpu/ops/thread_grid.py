"""The thread grid of a register-blocked tile, shared by the matmul family
(ops/matmul_gen.MatmulConfig) and the implicit-GEMM convolutions (ops/conv_gen.ConvTiles)."""

from __future__ import annotations


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
