"""Convolution tiles chosen by the generic tuner (ops/tuner.py).

Three tunables, one per generated kernel kind (ops/conv_gen.py): conv2d (the forward),
conv2d_grad_weight, and conv_transpose2d (which also computes conv2d's input gradient).
The fallback is the size heuristic `choose_tiles`; the other candidates are tile shapes
around the ones the heuristic picks for large layers. Float64 references are NumPy
im2col products on small problems."""

from __future__ import annotations

import numpy as np

from . import tuner
from .conv_gen import ConvTiles, DirectTiles, choose_tiles, direct_applies

__all__: list[str] = []  # nothing here is a Device op

# Tile shapes tried besides the heuristic's: (tile_m, tile_n, rows per thread, tile_k).
_SHAPES = ((32, 64, 4, 8), (32, 64, 8, 8), (32, 128, 4, 8), (32, 128, 8, 8), (64, 64, 8, 8),
           (64, 128, 8, 8), (64, 64, 8, 16), (64, 128, 8, 16), (32, 128, 8, 16), (16, 128, 4, 8))


# Direct-form blockings tried for conv2d of stride 1, dilation 1 (ops/conv_gen.DirectTiles):
# (channels per workgroup, per thread, columns per thread, output rows per workgroup, channels per step).
# Measured on an H200 (docs/BENCHMARKS.md): narrow channel blocks (16 x 4) over 4 rows were fastest.
_DIRECT = ((16, 4, 8, 4, 4), (16, 4, 8, 4, 8), (16, 4, 8, 8, 4), (16, 4, 4, 4, 4), (8, 4, 8, 4, 4),
           (16, 8, 8, 4, 4), (32, 4, 8, 4, 4), (32, 8, 8, 4, 4), (32, 8, 8, 8, 4), (64, 8, 8, 4, 4),
           (64, 8, 4, 2, 4), (64, 4, 8, 2, 4))


def _tiles_label(tiles) -> str:
    if isinstance(tiles, DirectTiles):
        return tiles.name
    return f"{tiles.tile_m}x{tiles.tile_n}x{tiles.tile_k}_{tiles.rows}x{tiles.cols}"


def _tiles_parse(label: str):
    if label.startswith("d"):
        return DirectTiles.parse(label)
    tile, thread = label.split("_")
    m, n, k = (int(v) for v in tile.split("x"))
    rows, cols = (int(v) for v in thread.split("x"))
    return ConvTiles(m, n, rows, cols, k)


def _fits(dev, tiles: ConvTiles) -> bool:
    limits = dev.limits
    return (tiles.threads <= limits.get("max-compute-invocations-per-workgroup", 256)
            and tiles.threads_x <= limits.get("max-compute-workgroup-size-x", 256)
            and tiles.threads_y <= limits.get("max-compute-workgroup-size-y", 256)
            and (tiles.tile_m + tiles.tile_n) * tiles.tile_k * 4 <= dev.max_workgroup_storage)


def _out_size(size, kernel, stride, padding, dilation):
    return (size + 2 * padding - dilation * (kernel - 1) - 1) // stride + 1


def _out_hw(p) -> tuple[int, int]:
    """The output height and width of a conv2d problem tuple (as the tunables below unpack it)."""
    _, _, _, in_h, in_w, _, kh, kw, stride, padding, dilation, _ = p
    return (_out_size(in_h, kh, stride[0], padding[0], dilation[0]),
            _out_size(in_w, kw, stride[1], padding[1], dilation[1]))


def _im2col(x: np.ndarray, kh, kw, stride, padding, dilation, out_h, out_w) -> np.ndarray:
    """x [n, c, h, w] -> [n, c*kh*kw, out_h*out_w] (float64)."""
    n, c = x.shape[:2]
    padded = np.pad(x, ((0, 0), (0, 0), (padding[0],) * 2, (padding[1],) * 2))
    cols = np.empty((n, c, kh, kw, out_h, out_w))
    for i in range(kh):
        for j in range(kw):
            top, left = i * dilation[0], j * dilation[1]
            cols[:, :, i, j] = padded[:, :, top:top + stride[0] * (out_h - 1) + 1:stride[0],
                                      left:left + stride[1] * (out_w - 1) + 1:stride[1]]
    return cols.reshape(n, c * kh * kw, out_h * out_w)


class _ConvTunable(tuner.Tunable):
    version = 1
    kind = ""

    def __init__(self, name):
        self.name = name

    def bucket(self, p) -> str:
        rows, cols, depth = self.gemm(p)
        return f"{p[0]}-rows{tuner.pow2(rows)}-cols{tuner.pow2(cols)}-depth{tuner.pow2(depth)}"

    def work(self, p) -> float:
        rows, cols, depth = self.gemm(p)
        return 2.0 * rows * cols * depth * p[-1]

    def candidates(self, dev, p) -> list:
        rows, cols, _ = self.gemm(p)
        fallback = choose_tiles(rows, cols)
        found = [fallback]
        for m, n, r, k in _SHAPES:
            tiles = ConvTiles(m, n, r, 8, k)
            if tiles != fallback and m <= 2 * rows and n <= 2 * cols and _fits(dev, tiles):
                found.append(tiles)
        return found

    def direct(self, dev, p) -> list:
        """Direct-form candidates of a conv2d problem (none unless stride 1, dilation 1)."""
        _, batch, in_c, in_h, in_w, out_c, kh, kw, stride, padding, dilation, groups = p
        if not direct_applies(stride, dilation):
            return []
        m = out_c // groups
        out_h, out_w = _out_hw(p)
        limit = dev.limits.get("max-compute-invocations-per-workgroup", 256)
        found = []
        for tm, rm, cw, th, ck in _DIRECT:
            tiles = DirectTiles(tm, rm, cw, min(-(-out_w // cw), 16), th, min(ck, in_c // groups))
            if (tm <= 2 * m and th <= out_h and tiles.threads <= min(limit, 256)
                    and tiles.workgroup_bytes(kh, kw) <= dev.max_workgroup_storage and tiles not in found):
                found.append(tiles)
        return found

    def label(self, candidate) -> str:
        return _tiles_label(candidate)

    def parse(self, label: str):
        return _tiles_parse(label)

    def inputs(self, p, rng) -> list[np.ndarray]:
        return [rng.random(size, dtype=np.float32) - np.float32(0.5) for size in self.input_sizes(p)]


class _Conv2d(_ConvTunable):
    # problem: (dtype, batch, in_c, in_h, in_w, out_c, kh, kw, stride, padding, dilation, groups)
    def gemm(self, p):
        _, batch, in_c, in_h, in_w, out_c, kh, kw, stride, padding, dilation, groups = p
        out_h, out_w = _out_hw(p)
        return out_c // groups, batch * out_h * out_w, (in_c // groups) * kh * kw

    def input_sizes(self, p):
        _, batch, in_c, in_h, in_w, out_c, kh, kw, *_, groups = p
        return [batch * in_c * in_h * in_w, out_c * (in_c // groups) * kh * kw, out_c]

    def candidates(self, dev, p) -> list:
        return super().candidates(dev, p) + self.direct(dev, p)

    def small(self, p):
        return (p[0], 2, 3, 9, 9, 37, 3, 3, (1, 1), (1, 1), (1, 1), 1)

    def run(self, dev, tiles, p, buffers):
        _, batch, in_c, in_h, in_w, out_c, kh, kw, stride, padding, dilation, groups = p
        return dev.conv2d(buffers[0], buffers[1], buffers[2], batch, in_c, in_h, in_w, out_c, kh, kw,
                          stride, padding, dilation, groups, tiles=tiles)

    def reference(self, p, arrays):
        _, batch, in_c, in_h, in_w, out_c, kh, kw, stride, padding, dilation, groups = p
        assert groups == 1
        out_h, out_w = _out_hw(p)
        x = arrays[0].astype(np.float64).reshape(batch, in_c, in_h, in_w)
        weight = arrays[1].astype(np.float64).reshape(out_c, -1)
        cols = _im2col(x, kh, kw, stride, padding, dilation, out_h, out_w)
        return np.einsum("oq,nqp->nop", weight, cols) + arrays[2].astype(np.float64)[None, :, None]


class _Conv2dGradWeight(_Conv2d):
    def candidates(self, dev, p) -> list:
        return _ConvTunable.candidates(self, dev, p)  # no direct form for the weight gradient

    def gemm(self, p):
        _, batch, in_c, in_h, in_w, out_c, kh, kw, stride, padding, dilation, groups = p
        out_h, out_w = _out_hw(p)
        return out_c // groups, (in_c // groups) * kh * kw, batch * out_h * out_w

    def input_sizes(self, p):
        _, batch, in_c, in_h, in_w, out_c, kh, kw, stride, padding, dilation, groups = p
        out_h, out_w = _out_hw(p)
        return [batch * in_c * in_h * in_w, batch * out_c * out_h * out_w]

    def small(self, p):
        return (p[0], 2, 8, 9, 9, 37, 3, 3, (1, 1), (1, 1), (1, 1), 1)

    def run(self, dev, tiles, p, buffers):
        _, batch, in_c, in_h, in_w, out_c, kh, kw, stride, padding, dilation, groups = p
        out_h, out_w = _out_hw(p)
        return dev.conv2d_grad_weight(buffers[0], buffers[1], batch, in_c, in_h, in_w, out_c, out_h, out_w,
                                      kh, kw, stride, padding, dilation, groups, tiles=tiles)

    def reference(self, p, arrays):
        _, batch, in_c, in_h, in_w, out_c, kh, kw, stride, padding, dilation, groups = p
        assert groups == 1
        out_h, out_w = _out_hw(p)
        x = arrays[0].astype(np.float64).reshape(batch, in_c, in_h, in_w)
        grad = arrays[1].astype(np.float64).reshape(batch, out_c, out_h * out_w)
        cols = _im2col(x, kh, kw, stride, padding, dilation, out_h, out_w)
        return np.einsum("nop,nqp->oq", grad, cols)


class _ConvTranspose2d(_ConvTunable):
    # problem: (dtype, batch, in_c, in_h, in_w, out_c, out_h, out_w, kh, kw, stride, padding, dilation, groups)
    def gemm(self, p):
        _, batch, in_c, in_h, in_w, out_c, out_h, out_w, kh, kw, stride, padding, dilation, groups = p
        first_phase_cols = batch * -(-out_h // stride[0]) * -(-out_w // stride[1])
        return out_c // groups, first_phase_cols, (in_c // groups) * kh * kw

    def input_sizes(self, p):
        _, batch, in_c, in_h, in_w, out_c, out_h, out_w, kh, kw, *_, groups = p
        return [batch * in_c * in_h * in_w, in_c * (out_c // groups) * kh * kw]

    def small(self, p):
        return (p[0], 2, 5, 5, 5, 37, 9, 9, 3, 3, (2, 2), (1, 1), (1, 1), 1)

    def run(self, dev, tiles, p, buffers):
        from .conv import _launch_conv_transpose
        _, batch, in_c, in_h, in_w, out_c, out_h, out_w, kh, kw, stride, padding, dilation, groups = p
        return _launch_conv_transpose(dev, buffers[0], buffers[1], None, batch, in_c, in_h, in_w, out_c, out_h,
                                      out_w, kh, kw, stride, padding, dilation, groups, tiles=tiles)

    def reference(self, p, arrays):
        _, batch, in_c, in_h, in_w, out_c, out_h, out_w, kh, kw, stride, padding, dilation, groups = p
        assert groups == 1
        x = arrays[0].astype(np.float64).reshape(batch, in_c, in_h * in_w)
        weight = arrays[1].astype(np.float64).reshape(in_c, out_c, kh, kw)
        full_h = (in_h - 1) * stride[0] + dilation[0] * (kh - 1) + 1
        full_w = (in_w - 1) * stride[1] + dilation[1] * (kw - 1) + 1
        out = np.zeros((batch, out_c, max(full_h, out_h + padding[0]) + padding[0],
                        max(full_w, out_w + padding[1]) + padding[1]))
        for i in range(kh):
            for j in range(kw):
                taps = np.einsum("co,ncp->nop", weight[:, :, i, j], x).reshape(batch, out_c, in_h, in_w)
                top, left = i * dilation[0], j * dilation[1]
                out[:, :, top:top + stride[0] * (in_h - 1) + 1:stride[0],
                    left:left + stride[1] * (in_w - 1) + 1:stride[1]] += taps
        return out[:, :, padding[0]:padding[0] + out_h, padding[1]:padding[1] + out_w]


TUNABLES = {"conv2d": _Conv2d("conv2d"), "conv2d_grad_weight": _Conv2dGradWeight("conv2d_grad_weight"),
            "conv_transpose2d": _ConvTranspose2d("conv_transpose2d")}


def choose(dev, kind: str, problem: tuple, rows: int, cols: int) -> ConvTiles:
    """The tiles for one convolution launch (`kind` as in TUNABLES)."""
    return tuner.choose(dev, TUNABLES[kind], problem)
