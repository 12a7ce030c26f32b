"""Strided copies that move several elements a thread (ops/nd.strided_units): which layouts
get units, and gathers, scatters and converting gathers over layouts that do and do not
qualify, against numpy, with the launched thread count checked so a silent fallback to one
element a thread fails."""

import numpy as np
import pytest

from anygpu.ops.nd import strided_units
from anygpu.runtime.dtypes import FROM_NUMPY

# (name, base shape, slicing of the base, permutation, broadcast shape) and the elements a
# thread moves: 4-byte dtypes, f16 copies, f32 <-> f16 gathers.
LAYOUTS = [
    # q of a head split, [B, T, 3, H, D] -> [B, H, T, D]: the nanoGPT gather, small
    ("qkv", (2, 5, 3, 3, 8), np.s_[:, :, 1], (0, 2, 1, 3), None, (4, 8, 4)),
    ("qkv_all", (2, 5, 3, 3, 8), np.s_[:], (2, 0, 3, 1, 4), None, (4, 8, 4)),
    ("qkv_large", (4, 33, 3, 4, 32), np.s_[:, :, 2], (0, 2, 1, 3), None, (4, 8, 4)),  # many workgroups
    ("odd_inner", (4, 6, 7), np.s_[:], (1, 0, 2), None, (1, 1, 1)),
    ("inner_6", (3, 5, 6), np.s_[:], (1, 0, 2), None, (2, 2, 1)),
    ("inner_12", (3, 5, 12), np.s_[:], (1, 0, 2), None, (4, 4, 4)),
    ("offset_1", (3, 16), np.s_[:, 1:9], (0, 1), None, (1, 1, 1)),
    ("offset_2", (3, 16), np.s_[:, 2:10], (0, 1), None, (2, 2, 1)),
    ("offset_4", (3, 16), np.s_[:, 4:12], (0, 1), None, (4, 4, 4)),
    ("outer_stride_6", (3, 6), np.s_[:, :4], (0, 1), None, (2, 2, 1)),
    ("outer_stride_5", (3, 5), np.s_[:, :4], (0, 1), None, (1, 1, 1)),
    ("outer_step", (6, 4, 8), np.s_[::2, 1:3], (1, 0, 2), None, (4, 8, 4)),
    ("inner_step", (5, 16), np.s_[:, ::2], (0, 1), None, (1, 1, 1)),
    ("transpose_2d", (4, 8), np.s_[:], (1, 0), None, (1, 1, 1)),
    ("one_unit_rows", (6, 2, 4), np.s_[:, 1], (0, 1), None, (4, 4, 4)),
    ("contiguous", (4, 10), np.s_[:], (0, 1), None, (4, 8, 4)),
    ("contiguous_odd", (7,), np.s_[:], (0,), None, (1, 1, 1)),
    ("expand_outer", (1, 3, 8), np.s_[:], (0, 1, 2), (4, 3, 8), (4, 8, 4)),
    ("expand_middle", (5, 1, 12), np.s_[:], (1, 0, 2), (5, 3, 12), (4, 4, 4)),
    ("expand_inner", (3, 1), np.s_[:], (0, 1), (3, 8), (1, 1, 1)),
    ("one_element", (9,), np.s_[4:5], (0,), None, (1, 1, 1)),
    ("empty", (3, 0, 8), np.s_[:], (0, 1, 2), None, (4, 8, 4)),  # units, but nothing launched
]
IDS = [layout[0] for layout in LAYOUTS]


def view_of(base, piece, dims, expand):
    """The element indices of the view (into the flat base) and its (shape, strides, offset)
    in elements, as the Tensor layer passes them."""
    index = np.arange(int(np.prod(base))).reshape(base)[piece]
    if expand is not None:
        index = np.broadcast_to(index, expand)
    index = index.transpose(dims)
    strides = tuple(int(s) // index.itemsize for s in index.strides)
    offset = int(index.ravel()[0]) if index.size else 0
    return index, index.shape, strides, offset


def sample(rng, dtype, n):
    """n values of dtype: float words of every kind (NaN with payloads, inf, subnormals)."""
    if dtype == np.float32:
        return rng.integers(0, 2**32, n, dtype=np.uint32).view(np.float32)
    if dtype == np.float16:
        return rng.integers(0, 2**16, n, dtype=np.uint16).view(np.float16)
    if dtype == np.bool_:
        return rng.random(n) < 0.5
    info = np.iinfo(dtype)
    return rng.integers(info.min, info.max, n, dtype=dtype, endpoint=True)


def bits(values):
    """Float arrays as their bits (NaN payloads compared too); others unchanged."""
    return values.view({2: np.uint16, 4: np.uint32}[values.itemsize]) if values.dtype.kind == "f" else values


@pytest.fixture
def launches(dev, monkeypatch):
    """(kernel name, threads) of each strided copy launched while the test runs."""
    seen = []
    launch = dev.launch

    def spy(kernel, inputs, outputs, params=(), grid=(1, 1, 1)):
        if kernel.name.startswith("nd_strided"):
            seen.append((kernel.name, params[0]))  # params[0]: the threads that copy
        return launch(kernel, inputs, outputs, params, grid)

    monkeypatch.setattr(dev, "launch", spy)
    return seen


def test_strided_units_of_a_head_split():
    """The q of [2, 5, 3, 3, 8] -> [2, 3, 5, 8] (strides (360, 8, 72, 1), offset 24) in units."""
    _, shape, strides, offset = view_of((2, 5, 3, 3, 8), np.s_[:, :, 1], (0, 2, 1, 3), None)
    assert (shape, strides, offset) == ((2, 3, 5, 8), (360, 8, 72, 1), 24)
    # f16: one vec4<u32> of 8 halves a row, so the row dim goes
    assert strided_units(shape, strides, offset, "f16") == ("vec4<u32>", "vec4<u32>", 8, (2, 3, 5), (45, 1, 9), 3)
    assert strided_units(shape, strides, offset, "f32") == ("vec4<u32>", "vec4<u32>", 4, (2, 3, 5, 2),
                                                            (90, 2, 18, 1), 6)
    assert strided_units(shape, strides, offset, "bool") == strided_units(shape, strides, offset, "i32")
    assert strided_units(shape, strides, offset, "f16", "f32") == ("vec4<f16>", "vec4<f32>", 4, (2, 3, 5, 2),
                                                                   (90, 2, 18, 1), 6)
    assert strided_units(shape, strides, offset, "f32", "f16")[:3] == ("vec4<f32>", "vec4<f16>", 4)
    # one element a thread, in the types the kernel has always used
    assert strided_units(shape, strides, offset + 1, "f32") == ("u32", "u32", 1, shape, strides, offset + 1)
    assert strided_units(shape, strides, offset + 1, "f16")[:3] == ("f16", "f16", 1)
    assert strided_units(shape, strides, offset + 2, "f16", "f32")[:3] == ("f16", "f32", 1)
    assert strided_units((5,), (1,), 0, "f32")[:3] == ("u32", "u32", 1)
    # narrower units: 4 halves in a vec2<u32>, 2 in a u32 word, 2 words in a vec2<u32>
    assert strided_units((3, 4), (8, 1), 4, "f16") == ("vec2<u32>", "vec2<u32>", 4, (3,), (2,), 1)
    assert strided_units((3, 6), (6, 1), 0, "f16") == ("u32", "u32", 2, (9,), (1,), 0)
    assert strided_units((3, 6), (8, 1), 2, "f16") == ("u32", "u32", 2, (3, 3), (4, 1), 1)
    assert strided_units((3, 6), (8, 1), 2, "i32") == ("vec2<u32>", "vec2<u32>", 2, (3, 3), (4, 1), 1)


@pytest.mark.parametrize("dtype", [np.float32, np.float16, np.int32, np.uint32, np.bool_])
@pytest.mark.parametrize("name, base, piece, dims, expand, per_thread", LAYOUTS, ids=IDS)
def test_strided_gather_and_scatter_in_units(dev, rng, launches, name, base, piece, dims, expand, per_thread,
                                             dtype):
    """Gather a view of x; scatter values into y at the view's places (distinct places only),
    bit for bit as numpy, in as many threads as the layout's units."""
    index, shape, strides, offset = view_of(base, piece, dims, expand)
    per_unit = per_thread[1] if dtype == np.float16 else per_thread[0]
    assert strided_units(shape, strides, offset, FROM_NUMPY[np.dtype(dtype)])[2] == per_unit
    x = sample(rng, dtype, int(np.prod(base)))
    got = dev.read(dev.strided_gather(dev.upload(x), shape, strides, offset))
    np.testing.assert_array_equal(bits(got), bits(x[index.ravel()]))
    threads = [index.size // per_unit] if index.size else []
    if expand is None:
        y = sample(rng, dtype, x.size)
        values = sample(rng, dtype, index.size)
        dst = dev.upload(y)
        dev.strided_scatter(dev.upload(values), dst, shape, strides, offset)
        y[index.ravel()] = values
        np.testing.assert_array_equal(bits(dev.read(dst)), bits(y))
        threads *= 2
    assert [count for _, count in launches] == threads


def converting_sample(rng, dtype, n):
    """n values for a conversion: normal data of f16's range and beyond, with inf, -inf,
    NaN, +-0, f16's largest values and f32 values that round to them or overflow."""
    values = rng.standard_normal(n) * 3e4
    edges = [np.inf, -np.inf, np.nan, 0.0, -0.0, 65504.0, -65504.0, 65519.0, 65520.0, -7e4, 1e38, 1.0009765625,
             1.00048828125, 0.5, -2.5e-3]
    values[:min(n, len(edges))] = edges[:n]
    rng.shuffle(values)
    with np.errstate(over="ignore"):
        return values.astype(dtype)


@pytest.mark.parametrize("source, target", [(np.float16, np.float32), (np.float32, np.float16)])
@pytest.mark.parametrize("name, base, piece, dims, expand, per_thread", LAYOUTS, ids=IDS)
def test_strided_gather_converts_in_units(dev, rng, launches, name, base, piece, dims, expand, per_thread,
                                          source, target):
    """A gather converting between f16 and f32 (to nearest even, overflow to inf, NaN kept)."""
    index, shape, strides, offset = view_of(base, piece, dims, expand)
    x = converting_sample(rng, source, int(np.prod(base)))
    out = dev.strided_gather(dev.upload(x), shape, strides, offset, dtype="f32" if target is np.float32 else "f16")
    with np.errstate(over="ignore"):
        want = x[index.ravel()].astype(target)
    np.testing.assert_array_equal(dev.read(out), want)
    assert [count for _, count in launches] == ([index.size // per_thread[2]] if index.size else [])


def test_strided_scatter_refuses_a_conversion(dev):
    with pytest.raises(ValueError, match="f16 elements cannot go into a f32 buffer"):
        dev.strided_scatter(dev.upload(np.zeros(8, np.float16)), dev.upload(np.zeros(8, np.float32)), (8,), (1,))
