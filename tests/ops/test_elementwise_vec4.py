"""The vec4 path of the elementwise ops (lengths that are multiples of 4) against NumPy,
and the scalar path beside it, including grids folded past 65535 workgroups."""

import numpy as np
import pytest

from anygpu.ops import elementwise

UNARY_REFERENCES = {
    "scale": lambda x: x * -2.5,
    "relu": lambda x: np.maximum(x, 0),
    "sigmoid": lambda x: 1 / (1 + np.exp(-x)),
    "tanh": np.tanh,
    "clamp": lambda x: np.clip(x, -0.5, 0.25),
}
BINARY_REFERENCES = {"add": np.add, "sub": np.subtract, "mul": np.multiply,
                     "relu_backward": lambda g, x: g * (x > 0)}


@pytest.mark.parametrize("n", [4, 1036, 1037])
@pytest.mark.parametrize("name", UNARY_REFERENCES)
def test_unary_vec4_and_scalar_paths(dev, rng, name, n):
    x = (rng.standard_normal(n) * 3).astype(np.float32)
    alpha, beta = (-2.5, 0.0) if name == "scale" else (-0.5, 0.25)
    got = dev.read(elementwise.unary(dev, name, dev.upload(x), alpha, beta))
    np.testing.assert_allclose(got, UNARY_REFERENCES[name](x.astype(np.float64)), rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("n", [8, 4096, 4095])
@pytest.mark.parametrize("name", BINARY_REFERENCES)
def test_binary_vec4_and_scalar_paths(dev, rng, name, n):
    a, b = rng.standard_normal((2, n)).astype(np.float32)
    got = dev.read(elementwise.binary(dev, name, dev.upload(a), dev.upload(b)))
    np.testing.assert_allclose(got, BINARY_REFERENCES[name](a.astype(np.float64), b), rtol=1e-6, atol=1e-7)


def test_unary_writes_into_a_given_output(dev, rng):
    x = rng.standard_normal(64).astype(np.float32)
    out = dev.alloc(64)
    assert elementwise.unary(dev, "relu", dev.upload(x), out=out) is out
    np.testing.assert_array_equal(dev.read(out), np.maximum(x, 0))


def test_vec4_kernel_recovers_the_index_from_a_folded_grid(dev, rng):
    """Grids past 65535 workgroups are folded into (x, y); the kernels rebuild the
    linear index from both. Launch the vec4 kernel on a small folded grid directly."""
    n4 = 5 * 256 + 7
    x = rng.standard_normal(4 * n4).astype(np.float32)
    out = dev.alloc(4 * n4)
    params = elementwise.UNARY_PARAMS
    kernel = dev.kernel("scale", elementwise.source("unary_vec4.wgsl", elementwise.UNARY["scale"], params), 1, 1,
                        params.format())
    dev.launch(kernel, (dev.upload(x),), (out,), (n4, 3.0, 0.0), (3, 2, 1))   # 6 workgroups cover 6*256 >= n4
    np.testing.assert_array_equal(dev.read(out), 3.0 * x)


def test_scalar_path_past_65535_workgroups(dev):
    n = 65535 * 256 + 1001   # odd: the scalar kernel, on a folded 2-D grid
    x = np.arange(n, dtype=np.float32) % 1021 - 510
    out = dev.read(dev.scale(dev.upload(x), 2.0))
    np.testing.assert_array_equal(out[-5000:], 2 * x[-5000:])
    np.testing.assert_array_equal(out[::4099], 2 * x[::4099])


@pytest.mark.parametrize("kind", ["unary", "binary"])
def test_every_entry_gives_the_same_numbers_on_both_paths(dev, rng, kind):
    """Every UNARY/BINARY entry, present and future (helper functions included), compiles
    as vec4 and agrees with the scalar kernel, whose numbers the other tests check."""
    table = elementwise.UNARY if kind == "unary" else elementwise.BINARY
    a, b = (rng.standard_normal((2, 1037)) * 2).astype(np.float32)
    for name in table:
        if kind == "unary":
            def run(n):
                return dev.read(elementwise.unary(dev, name, dev.upload(a[:n]), 0.75, 1.5))
        else:
            def run(n):
                return dev.read(elementwise.binary(dev, name, dev.upload(a[:n]), dev.upload(b[:n]), 0.75))
        scalar, vec4 = run(1037), run(1036)
        np.testing.assert_allclose(vec4, scalar[:1036], rtol=1e-5, atol=1e-6, equal_nan=True, err_msg=name)
