"""int64 past 32 bits (issue 26 item 2): anygpu keeps int64 in i32. Every op whose int64
result can pass 32 bits is exact where torch's int64 result fits and a ValueError naming the
op where it would not, never a wrapped value: data, factories and Python numbers are checked
on the host before any GPU work; the GPU kernels (+ - * // **, neg/abs/square, matmul, prod,
cumsum, cumprod, float -> int64) report a result beyond 32 bits, and the next host read of
any tensor raises. The oracle is torch's int64 on the CPU."""

import numpy as np
import pytest
import torch

import anygpu as ag
from anygpu.ops import gpu, intmath

LOW, HIGH = -2**31, 2**31 - 1
EDGES = np.array([0, 1, -1, 2, -2, 3, 7, -7, 46340, 46341, -46341, 65535, 65536, -65536,
                  2**30, -2**30, 2**30 + 1, HIGH, HIGH - 1, LOW, LOW + 1], np.int64)


@pytest.fixture(autouse=True)
def no_overflow_left_unread():
    """Each test reads every overflow it causes: one left pending would fail the next read."""
    yield
    intmath.raise_if_overflowed(gpu())


def fits(values) -> np.ndarray:
    values = np.asarray(values)
    return (values >= LOW) & (values <= HIGH)


def expect_overflow(op: str, make):
    """make() (or its first read) raises the overflow ValueError of `op`; the device works after."""
    with pytest.raises(ValueError, match=rf"^{op}: .*(beyond the 32 bits anygpu keeps int64 in|no int64 value)"):
        make().numpy()
    assert (ag.tensor([5, -6]) * 7).tolist() == [35, -42]


def operands(rng, shape_a, shape_b):
    """Random int64 operands drawn from the edges near +-2**31 and small numbers."""
    pool = np.concatenate([EDGES, rng.integers(-1000, 1000, 8)])
    return rng.choice(pool, shape_a), rng.choice(pool, shape_b)


TORCH_BINARY = {"add": torch.add, "sub": torch.sub, "mul": torch.mul, "floordiv": torch.floor_divide}
OURS_BINARY = {"add": lambda a, b: a + b, "sub": lambda a, b: a - b, "mul": lambda a, b: a * b,
               "floordiv": lambda a, b: a // b}


@pytest.mark.parametrize("name", sorted(TORCH_BINARY))
@pytest.mark.parametrize("shapes", [((7,), (7,)), ((3, 1, 5), (4, 1)), ((), (6,)), ((0, 3), (3,)), ((), ())])
def test_binary_ops_exact_where_torch_fits_and_an_error_where_not(name, shapes):
    rng = np.random.default_rng(abs(hash((name, shapes))) % 2**32)
    a, b = operands(rng, *shapes)
    if name == "floordiv":
        b = np.where(b == 0, 3, b)  # division by zero is another matter
    want = TORCH_BINARY[name](torch.tensor(a), torch.tensor(b)).numpy()
    # Keep the elements whose result fits: a copy of the operands with the others made harmless.
    good = np.broadcast_to(fits(want), want.shape)
    a_fit, b_fit = np.broadcast_arrays(a, b)
    a_fit, b_fit = np.where(good, a_fit, 1), np.where(good, b_fit, 1)
    got = OURS_BINARY[name](ag.tensor(a_fit), ag.tensor(b_fit))
    assert got.dtype == ag.int64 and got.shape == want.shape
    np.testing.assert_array_equal(got.numpy(), np.where(good, want, TORCH_BINARY[name](
        torch.tensor(a_fit), torch.tensor(b_fit)).numpy()))
    if not good.all():
        expect_overflow(name, lambda: OURS_BINARY[name](ag.tensor(a), ag.tensor(b)))


@pytest.mark.parametrize("name, a, b", [
    ("add", HIGH, 1), ("add", LOW, -1), ("add", 2**30, 2**30), ("sub", LOW, 1), ("sub", 0, LOW),
    ("sub", HIGH, -1), ("mul", 46341, 46341), ("mul", LOW, -1), ("mul", -1, LOW), ("mul", 65536, 32768),
    ("mul", -65536, -32768), ("floordiv", LOW, -1),
])
def test_each_overflow_is_named(name, a, b):
    expect_overflow(name, lambda: OURS_BINARY[name](ag.tensor([3, a, 4]), ag.tensor([1, b, 2])))
    expect_overflow(name, lambda: OURS_BINARY[name](ag.tensor(a), b))  # a Python number operand


def test_results_at_the_edges_fit_exactly():
    x = ag.tensor([HIGH - 1, LOW + 1, 2**30, -65536])
    y = ag.tensor([1, -1, 2**30 - 1, 32768])
    assert (x + y).tolist() == [HIGH, LOW, HIGH, -32768]
    assert (ag.tensor([LOW + 1, 0]) - ag.tensor([1, -HIGH])).tolist() == [LOW, HIGH]
    assert (ag.tensor([-65536, 46340]) * ag.tensor([32768, 46340])).tolist() == [LOW, 46340**2]
    assert (ag.tensor([LOW, LOW]) // ag.tensor([1, 2])).tolist() == [LOW, -2**30]


def test_pow_against_torch():
    base = torch.tensor([2, -2, 3, -3, 7, 46340, -1, 1, 0, 10, 2, 0])
    exponent = torch.tensor([30, 31, 19, 19, 11, 2, 31, 100, 5, 9, 0, 0])
    want = (base ** exponent).tolist()
    assert all(LOW <= v <= HIGH for v in want)
    got = ag.tensor(base.numpy()) ** ag.tensor(exponent.numpy())
    assert got.tolist() == want
    negative = torch.tensor([-1, -2, -3, -1, -1])  # integer powers with negative exponents, as torch
    bases = torch.tensor([2, -1, -1, 1, 0])
    assert (ag.tensor(bases.numpy()) ** ag.tensor(negative.numpy())).tolist() == (bases ** negative).tolist()
    assert (ag.tensor([-2, 3]) ** 3).tolist() == [-8, 27]
    for base_value, exp_value in ((2, 31), (-2, 32), (3, 20), (46341, 2), (10, 10)):
        expect_overflow("pow", lambda: ag.tensor([1, base_value]) ** ag.tensor([1, exp_value]))
    expect_overflow("pow", lambda: ag.tensor([5, 2]) ** 40)


def test_neg_abs_square():
    x = ag.tensor([HIGH, LOW + 1, 0, -5, 46340])
    assert (-x).tolist() == [-HIGH, HIGH, 0, 5, -46340]
    assert x.abs().tolist() == [HIGH, HIGH, 0, 5, 46340]
    assert ag.tensor([-46340, 7]).square().tolist() == [46340**2, 49]
    expect_overflow("neg", lambda: -ag.tensor([1, LOW]))
    expect_overflow("abs", lambda: ag.tensor([[LOW], [3]]).abs())
    expect_overflow("square", lambda: ag.tensor([46341]).square())


def test_in_place_forms_are_checked():
    x = ag.tensor([HIGH - 2, 0])
    x += 2
    assert x.tolist() == [HIGH, 2]
    x.mul_(1)
    assert x.tolist() == [HIGH, 2]

    def overflowing():
        y = ag.tensor([HIGH, 1])
        y.add_(1)
        return y
    expect_overflow("add", overflowing)


def test_python_integers_beyond_32_bits():
    x = ag.tensor([3, -4, 0])
    for make in (lambda: x * 3_000_000_000, lambda: x + (1 << 40), lambda: (1 << 40) - x,
                 lambda: x // -(2**31 + 1), lambda: ag.maximum(x, ag.tensor(2**40))):
        with pytest.raises(ValueError, match=r"2\*\*31|int32 range"):
            make()
    # comparisons and clamp bounds beyond 32 bits are exact, as torch's int64
    t = torch.tensor([3, -4, 0])
    for big in (2**40, -2**40, 2**31, -2**31 - 1):
        for op in ("__lt__", "__le__", "__gt__", "__ge__", "__eq__", "__ne__"):
            assert getattr(x, op)(big).tolist() == getattr(t, op)(big).tolist(), (op, big)
    assert x.clamp(min=-2**40, max=2**40).tolist() == [3, -4, 0]
    assert x.clamp(max=2**35).tolist() == [3, -4, 0]
    with pytest.raises(ValueError, match="clamp: the integer 1099511627776"):
        x.clamp(min=2**40)
    # a float tensor with such a number is float arithmetic
    assert (ag.tensor([1.5]) * 2**40).item() == 1.5 * 2**40
    assert (ag.tensor([1.5]) < 2**40).tolist() == [True]


def test_factories_refuse_values_beyond_32_bits():
    with pytest.raises(ValueError, match="tensor: the integer 1099511627776 is outside the int32 range"):
        ag.tensor([2**40])
    with pytest.raises(ValueError, match="int32 range"):
        ag.tensor(np.array([-2**31 - 1], np.int64))
    with pytest.raises(ValueError, match="tensor: NaN"):
        ag.tensor([1.0, float("nan")], dtype=ag.int64)
    with pytest.raises(ValueError, match=r"arange: the integer 214748364\d is outside the int32 range"):
        ag.arange(2**31 - 2, 2**31 + 2)
    with pytest.raises(ValueError, match="arange: .*int32 range"):
        ag.arange(0, 2**40, 2**38)
    with pytest.raises(ValueError, match="full: the integer 3000000000"):
        ag.full((2, 3), 3_000_000_000)
    with pytest.raises(ValueError, match="full: the integer 3000000000"):
        ag.full((2,), 3e9, dtype=ag.int64)
    with pytest.raises(ValueError, match="full: the integer -2147483649"):
        ag.zeros(3, dtype=ag.int64).fill_(-2**31 - 1)
    with pytest.raises(ValueError, match="full: the integer"):
        ag.full_like(ag.tensor([1, 2]), 2**33)
    with pytest.raises(ValueError, match="randint: the integer 1099511627775"):
        ag.randint(0, 2**40, (3,))
    with pytest.raises(ValueError, match="randint: the integer -2147483649"):
        ag.randint(-2**31 - 1, 0, (3,))
    # the extremes themselves fit
    assert ag.full((2,), LOW).tolist() == [LOW, LOW]
    assert ag.arange(HIGH - 2, HIGH + 1).tolist() == [HIGH - 2, HIGH - 1, HIGH]
    drawn = ag.randint(LOW, 2**31, (50,)).numpy()
    assert drawn.min() >= LOW and drawn.max() <= HIGH
    assert ag.tensor([2.9, -2.9], dtype=ag.int64).tolist() == [2, -2]
    assert ag.full((1,), 3e9).item() == 3e9  # float: no int64 involved


def test_float_to_int64_casts():
    values = np.array([0.5, -0.5, 2.9, -2.9, 2147483520.0, -2147483648.0, 1e9, -7.0], np.float32)
    want = torch.tensor(values).long().tolist()
    assert ag.tensor(values).long().tolist() == want
    assert ag.tensor(values).to(ag.int64).tolist() == want
    half = ag.tensor(np.array([1.5, -65504.0, 300.25], np.float16))
    assert half.long().tolist() == torch.tensor([1.5, -65504.0, 300.25], dtype=torch.float16).long().tolist()
    expect_overflow("to", lambda: ag.tensor([1.0, 3e9]).long())
    expect_overflow("to", lambda: ag.tensor([-2147483904.0]).long())  # the next float below -2**31
    expect_overflow("to", lambda: ag.tensor([[float("nan")], [1.0]]).long())
    expect_overflow("to", lambda: ag.tensor([float("inf")]).to(ag.int64))
    assert ag.tensor([3e9]).int().dtype == ag.int32  # int32 as torch's: no check (its value is unspecified)


def test_matmul_against_torch():
    rng = np.random.default_rng(7)
    a = rng.integers(-8191, 8192, (2, 5, 13))
    b = rng.integers(-8191, 8192, (13, 3))
    want = (torch.tensor(a) @ torch.tensor(b)).numpy()
    np.testing.assert_array_equal((ag.tensor(a) @ ag.tensor(b)).numpy(), want)
    # partial sums beyond 32 bits, final values that fit (and the extremes)
    a = np.array([[2**30, 2**30, -2**30, -2**30 + 5], [LOW, LOW, HIGH, HIGH]], np.int64)
    b = np.array([[1, 1], [1, 0], [1, 1], [1, 0]], np.int64)
    want = (torch.tensor(a) @ torch.tensor(b)).numpy()
    assert fits(want).all()
    np.testing.assert_array_equal((ag.tensor(a) @ ag.tensor(b)).numpy(), want)
    # products of 2**62 whose sum wraps 64 bits: still seen
    big = ag.tensor([[LOW] * 4])
    expect_overflow("matmul", lambda: big @ big.t())
    expect_overflow("matmul", lambda: ag.tensor([[HIGH, 1]]) @ ag.tensor([[1], [1]]))
    expect_overflow("matmul", lambda: ag.tensor([46341, 0]) @ ag.tensor([46341, 9]))
    assert (ag.tensor(np.zeros((2, 0), np.int64)) @ ag.tensor(np.zeros((0, 3), np.int64))).tolist() == [[0] * 3] * 2


def test_int32_keeps_wrapping_as_torch():
    x32 = ag.tensor([HIGH], dtype=ag.int32)
    assert (x32 + 1).tolist() == (torch.tensor([HIGH], dtype=torch.int32) + 1).tolist() == [LOW]
    a = np.array([[65536, 65536]], np.int32)
    b = np.array([[65536], [3]], np.int32)
    assert (ag.tensor(a) @ ag.tensor(b)).tolist() == [[int(np.int32(196608))]]  # 2**32 wraps to 0


@pytest.mark.parametrize("shape, dim", [((11,), 0), ((3, 5), 1), ((4, 3, 2), 1), ((), 0), ((0, 4), 1), ((3, 0), 1)])
def test_prod_cumprod_cumsum_against_torch(shape, dim):
    rng = np.random.default_rng(len(shape) * 10 + dim)
    x = rng.integers(-9, 10, shape)
    t = torch.tensor(x)
    ours = ag.tensor(x)
    np.testing.assert_array_equal(ours.prod(dim).numpy(), t.prod(dim).numpy())
    np.testing.assert_array_equal(ours.prod(dim, keepdim=True).numpy(), t.prod(dim, keepdim=True).numpy())
    np.testing.assert_array_equal(ours.cumprod(dim).numpy(), t.cumprod(dim).numpy())
    np.testing.assert_array_equal(ours.cumsum(dim).numpy(), t.cumsum(dim).numpy())
    assert ours.prod().item() == t.prod().item()
    assert ours.prod(dim).dtype == ours.cumprod(dim).dtype == ours.cumsum(dim).dtype == ag.int64


def test_products_and_running_values_past_32_bits():
    assert ag.tensor([2**20, 2**20, 0]).prod().item() == 0  # a zero factor: 0, whatever came before
    assert ag.tensor([[-2**16, 2**15], [3, 5]]).prod(1).tolist() == [LOW, 15]
    assert ag.tensor([0, 2**20, 2**20]).cumprod(0).tolist() == [0, 0, 0]
    assert ag.tensor([True, True, False]).prod().item() == 0
    expect_overflow("prod", lambda: ag.tensor([2**16, 2**15, 1]).prod())
    expect_overflow("prod", lambda: ag.tensor([[1, 2], [2**20, 2**20]]).prod(1))
    expect_overflow("cumprod", lambda: ag.tensor([2**20, 2**20, 0]).cumprod(0))  # torch: [2**20, 2**40, 0]
    expect_overflow("cumsum", lambda: ag.tensor([2**30, 2**30, -2**30]).cumsum(0))
    expect_overflow("cumsum", lambda: ag.tensor(np.full((3, 300), 2**23, np.int64)).cumsum(1))
    running = np.array([2**30, -2**30, 2**30 - 1, 2**30, -2**30, 7], np.int64)
    np.testing.assert_array_equal(ag.tensor(running).cumsum(0).numpy(), np.cumsum(running))
    mask = ag.tensor(np.ones(100_000, bool))
    assert mask.cumsum(0)[-1].item() == 100_000


def test_sums_that_fit_are_exact_whatever_their_terms():
    values = np.array([2**30, 2**30, -2**30, 2**30 - 1, -2**30, 7], np.int64)  # partial sums pass 2**31
    for dim in (None, 0):
        ours = ag.tensor(values).sum() if dim is None else ag.tensor(values).sum(dim)
        assert ours.item() == torch.tensor(values).sum().item() == int(values.sum())
    rows = np.array([[2**31 - 1, 0], [-2**31, 5]], np.int64)
    np.testing.assert_array_equal(ag.tensor(rows).sum(1).numpy(), rows.sum(1))
    assert ag.tensor(rows).sum(0).dtype == ag.int64


@pytest.mark.parametrize("make", [
    lambda: ag.tensor([2**30, 2**30, 2**30]).sum(),
    lambda: ag.tensor([[2**30, 2**30], [1, 2]]).sum(1),
    lambda: ag.tensor([-2**31, -1]).sum(),
    lambda: ag.tensor(np.full(70000, 40000, np.int32)).sum(),
])
def test_sums_beyond_32_bits_raise(make):
    with pytest.raises(ValueError, match=r"integer sum reaches -?\d+, beyond the 32 bits"):
        make()


def test_bool_counts_and_float_sums_are_untouched():
    mask = ag.tensor(np.ones(100_000, bool))
    assert mask.sum().item() == 100_000
    big = ag.tensor(np.full(4, 2.0**30, np.float32))
    assert big.sum().item() == 2.0**32


def test_every_host_read_raises_and_a_wrapped_index_never_passes():
    for read in (lambda t: t.item(), lambda t: t.tolist(), lambda t: bool(t), lambda t: int(t),
                 lambda t: [0, 1][t], lambda t: repr(t)):
        wrapped = ag.tensor(HIGH) + 1
        with pytest.raises(ValueError, match="^add: 2147483647 \\+ 1 = 2147483648"):
            read(wrapped)
    # used only on the GPU: as a gather index (2**32 + 1 would wrap to 1) ...
    index = ag.tensor([2**16]) * 2**16 + 1
    with pytest.raises(ValueError, match="^mul: 65536 \\* 65536"):
        ag.tensor([10.0, 20.0, 30.0]).index_select(0, index)
    # ... or as an embedding id whose loss is read: the float read raises
    ids = ag.tensor([2**16]) * 2**16 + 1
    weight = ag.randn(4, 3, requires_grad=True)
    loss = ag.nn.functional.embedding(ids, weight).sum()
    with pytest.raises(ValueError, match="^mul: "):
        loss.item()
    assert (ag.tensor([1, 2]) + ag.tensor([3, 4])).tolist() == [4, 6]


def test_the_first_report_is_named_and_the_others_listed():
    a = ag.tensor([HIGH]) + 1  # noqa: F841 (never read: the next read reports it)
    b = ag.tensor([46341]) * 46341  # noqa: F841
    with pytest.raises(ValueError, match=r"^add: .*also beyond 32 bits since the last read: mul"):
        ag.tensor([1.0]).item()
    assert ag.tensor([1.0]).item() == 1.0  # reported once


def test_a_replayed_step_still_reports():
    x = ag.tensor([1, 2, 3])
    out = ag.zeros(3, dtype=ag.int64)

    @ag.compile
    def step(values):
        out.copy_(values * 1000)

    for _ in range(4):  # recorded twice, then replayed: the kernel runs without this Python
        step(x)
    assert out.tolist() == [1000, 2000, 3000]
    x.copy_(ag.tensor([2**22, 1, 1]))
    step(x)
    with pytest.raises(ValueError, match=r"^mul: 4194304 \* 1000 = 4194304000"):
        out.tolist()
