"""Layer-0 ops on i32, bool and f16 Buffers against torch on the CPU (odd sizes, random data)."""

import numpy as np
import pytest
import torch

N = 37  # odd: the scalar kernels; multiples of 4 take the vec4 ones
SIZES = [N, 4 * N]


def ints(rng, n, low=-50, high=50):
    return rng.integers(low, high, n).astype(np.int32)


@pytest.mark.parametrize("n", SIZES)
@pytest.mark.parametrize("name, torch_fn", [
    ("add", torch.add), ("sub", torch.sub), ("mul", torch.mul),
    ("floor_divide", torch.floor_divide), ("remainder", torch.remainder),
    ("maximum", torch.maximum), ("minimum", torch.minimum),
    ("bitwise_and", torch.bitwise_and), ("bitwise_or", torch.bitwise_or), ("bitwise_xor", torch.bitwise_xor),
])
def test_i32_binary_is_exact(dev, rng, n, name, torch_fn):
    a, b = ints(rng, n), ints(rng, n)
    b[b == 0] = 3  # torch refuses integer division by zero
    got = dev.read(dev.binary(name, dev.upload(a), dev.upload(b)))
    assert got.dtype == np.int32
    np.testing.assert_array_equal(got, torch_fn(torch.tensor(a), torch.tensor(b)).numpy())


def test_i32_pow_and_large_values_stay_exact(dev, rng):
    a, b = ints(rng, N, -6, 7), ints(rng, N, 0, 6)
    got = dev.read(dev.binary("pow", dev.upload(a), dev.upload(b)))
    np.testing.assert_array_equal(got, torch.pow(torch.tensor(a), torch.tensor(b)).numpy())
    big = np.array([2**24 + 1, 2**30 + 3, -(2**31) + 5], np.int32)  # not representable in f32
    got = dev.read(dev.binary("add", dev.upload(big), dev.upload(np.ones(3, np.int32))))
    np.testing.assert_array_equal(got, big + 1)


@pytest.mark.parametrize("name", ["neg", "abs", "square", "sign", "relu", "bitwise_not"])
def test_i32_unary(dev, rng, name):
    a = ints(rng, N)
    torch_fn = {"relu": torch.relu, "bitwise_not": torch.bitwise_not}.get(name) or getattr(torch, name)
    np.testing.assert_array_equal(dev.read(dev.unary(name, dev.upload(a))), torch_fn(torch.tensor(a)).numpy())
    np.testing.assert_array_equal(dev.read(dev.unary("clamp", dev.upload(a), -7, 9)), np.clip(a, -7, 9))


@pytest.mark.parametrize("dtype", ["i32", "f16", "f32"])
@pytest.mark.parametrize("name", ["eq", "ne", "lt", "le", "gt", "ge"])
def test_comparisons_give_bool_of_any_dtype(dev, rng, dtype, name):
    a = ints(rng, N, -3, 3).astype({"i32": np.int32, "f16": np.float16, "f32": np.float32}[dtype])
    b = ints(rng, 1, -3, 3).astype(a.dtype)
    buf, shape = dev.broadcast_binary(name, dev.upload(a), (N,), dev.upload(b), (1,), out_dtype="bool")
    want = getattr(torch, name)(torch.tensor(a), torch.tensor(b)).numpy()
    got = dev.read(buf)
    assert buf.dtype == "bool" and got.dtype == np.bool_ and shape == (N,)
    np.testing.assert_array_equal(got, want)
    # without out_dtype: the f32 0/1 masks the Tensor layer multiplies with
    same = dev.read(dev.binary(name, dev.upload(a), dev.upload(np.repeat(b, N))))
    np.testing.assert_array_equal(same, want.astype(np.float32))


def test_bool_logic_and_counting(dev, rng):
    a, b = rng.random(N) < 0.5, rng.random(N) < 0.5
    for name, want in [("logical_and", a & b), ("logical_or", a | b), ("logical_xor", a ^ b)]:
        np.testing.assert_array_equal(dev.read(dev.binary(name, dev.upload(a), dev.upload(b))), want)
    np.testing.assert_array_equal(dev.read(dev.unary("logical_not", dev.upload(a))), ~a)
    count = dev.reduce_axis(dev.upload(a), 1, N, 1, "sum")
    assert count.dtype == "i32" and dev.read(count)[0] == a.sum()


@pytest.mark.parametrize("op", ["sum", "max", "min", "argmax", "argmin"])
def test_i32_reductions_over_each_axis(dev, rng, op):
    x = ints(rng, 3 * 5 * 7).reshape(3, 5, 7)
    for axis in range(3):
        outer, mid, inner = int(np.prod(x.shape[:axis])), x.shape[axis], int(np.prod(x.shape[axis + 1:]))
        got = dev.read(dev.reduce_axis(dev.upload(x), outer, mid, inner, op))
        want = getattr(torch, op)(torch.tensor(x), axis)
        want = (want[0] if isinstance(want, tuple) else want).numpy().reshape(-1)  # max/min: (values, indices)
        np.testing.assert_array_equal(got, want)


def test_i32_matmul_is_exact(dev, rng):
    a, b = ints(rng, 3 * 37 * 29).reshape(3, 37, 29), ints(rng, 3 * 29 * 13).reshape(3, 29, 13)
    got = dev.read(dev.batch_matmul(dev.upload(a), dev.upload(b), 3, 37, 13, 29)).reshape(3, 37, 13)
    np.testing.assert_array_equal(got, torch.bmm(torch.tensor(a), torch.tensor(b)).numpy())
    with pytest.raises(ValueError, match="must both be f32, f16 or i32"):
        dev.batch_matmul(dev.upload(a), dev.upload(b.astype(np.float32)), 3, 37, 13, 29)


@pytest.mark.parametrize("src, dst", [("f32", "i32"), ("i32", "f32"), ("f32", "bool"), ("bool", "f32"),
                                      ("i32", "bool"), ("bool", "i32"), ("f32", "f16"), ("f16", "f32"),
                                      ("f16", "i32"), ("i32", "u32"), ("u32", "i32")])
def test_cast_as_torch(dev, rng, src, dst):
    np_of = {"f32": np.float32, "f16": np.float16, "i32": np.int32, "u32": np.uint32, "bool": np.bool_}
    x = (rng.standard_normal(N) * 20)
    x[:3] = [0.0, -0.0, 2.5]
    if src == "bool":
        x = x > 0
    elif src == "u32":
        x = np.abs(x)
    x = x.astype(np_of[src])
    got = dev.read(dev.cast(dev.upload(x), dst))
    assert got.dtype == np_of[dst]
    np.testing.assert_array_equal(got, x.astype(np_of[dst]))


@pytest.mark.parametrize("n", SIZES)
def test_f16_storage_computes_in_f32(dev, rng, n):
    if not dev.supports("f16"):
        with pytest.raises(ValueError, match="shader-f16"):
            dev.upload(np.ones(3, np.float16))
        return
    a = rng.standard_normal(n).astype(np.float16)
    b = rng.standard_normal(n).astype(np.float16)
    ha, hb = dev.upload(a), dev.upload(b)
    assert ha.dtype == "f16" and ha.itemsize == 2 and ha.nbytes == 2 * n
    np.testing.assert_array_equal(dev.read(ha), a)
    want = (torch.tensor(a).float() * torch.tensor(b).float()).half().numpy()
    np.testing.assert_array_equal(dev.read(dev.binary("mul", ha, hb)), want)
    got = dev.read(dev.unary("gelu", ha)).astype(np.float32)
    np.testing.assert_allclose(got, torch.nn.functional.gelu(torch.tensor(a).float()).numpy(), atol=2e-3, rtol=2e-3)
    # sums of many f16 values accumulate in f32: no rounding per step
    total = dev.read(dev.reduce_axis(ha, 1, n, 1, "sum"))
    assert total.dtype == np.float16
    np.testing.assert_allclose(float(total[0]), float(a.astype(np.float64).sum()), rtol=2e-3, atol=2e-3)


def test_f16_matmul_gather_and_copies(dev, rng):
    if not dev.supports("f16"):
        pytest.skip("adapter without shader-f16")
    a = rng.standard_normal((37, 29)).astype(np.float16)
    b = rng.standard_normal((29, 13)).astype(np.float16)
    got = dev.read(dev.matmul(dev.upload(a), dev.upload(b), 37, 13, 29)).reshape(37, 13)
    want = (torch.tensor(a).double() @ torch.tensor(b).double()).numpy()
    np.testing.assert_allclose(got.astype(np.float64), want, atol=2e-2, rtol=1e-2)
    index = np.array([3, -1, 0, 5], np.int32)
    x = rng.standard_normal(7 * 3).astype(np.float16)
    got = dev.read(dev.gather_axis(dev.upload(x), dev.upload(index), 1, 7, 4, 3)).reshape(4, 3)
    np.testing.assert_array_equal(got, x.reshape(7, 3)[index])
    odd = dev.upload(x[:5])
    np.testing.assert_array_equal(dev.read(dev.copy(odd)), x[:5])
    with pytest.raises(ValueError, match="4-byte words"):
        dev.copy(odd, n=2, src_offset=1)


def test_where_keeps_dtype_and_takes_any_condition(dev, rng):
    cond = rng.random(N) < 0.5
    a, b = ints(rng, N), ints(rng, N)
    for c in (cond, cond.astype(np.float32)):
        got = dev.read(dev.where(dev.upload(c), dev.upload(a), dev.upload(b)))
        assert got.dtype == np.int32
        np.testing.assert_array_equal(got, np.where(cond, a, b))


def test_mixed_dtypes_and_missing_ops_are_refused(dev):
    i, f = dev.upload(np.ones(5, np.int32)), dev.upload(np.ones(5, np.float32))
    with pytest.raises(ValueError, match="add: a is i32 but b is f32"):
        dev.binary("add", i, f)
    with pytest.raises(ValueError, match="'exp' is not defined for i32"):
        dev.unary("exp", i)
    with pytest.raises(ValueError, match="dtype must be one of"):
        dev.empty(3, "f8")
    assert dev.empty(3, "f64").__class__.__name__ == "HostBuffer"  # float64 lives on the host (runtime/host.py)
