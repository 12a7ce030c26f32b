"""Lazy fusion of elementwise chains (ops/fusion.py): deferred ops give the same values as
op-by-op kernels (bit for bit, NaN and inf included), pending work is realized before
anything could change its inputs, pipelines are keyed by structure, not by scalars, and
fusion shows as fewer dispatches."""

import numpy as np
import pytest
import torch

import anygpu as ag
from anygpu.ops import Device, fusion
from anygpu.runtime.errors import GpuError

# Ops of a random program: name, arity, numpy reference of float64 arguments (None: no
# reference here, checked against the unfused run only), (alpha, beta) maker.
UNARY_OPS = [
    ("scale", lambda v, a, b: v * a, lambda r: (r.uniform(-2, 2), 0.0)),
    ("add_scalar", lambda v, a, b: v + a, lambda r: (r.uniform(-2, 2), 0.0)),
    ("relu", lambda v, a, b: np.where(v > 0, v, 0.0), lambda r: (0.0, 0.0)),
    ("tanh", lambda v, a, b: np.tanh(v), lambda r: (0.0, 0.0)),
    ("sigmoid", lambda v, a, b: 1 / (1 + np.exp(-v)), lambda r: (0.0, 0.0)),
    ("neg", lambda v, a, b: -v, lambda r: (0.0, 0.0)),
    ("square", lambda v, a, b: v * v, lambda r: (0.0, 0.0)),
    ("clamp", lambda v, a, b: np.clip(v, a, b), lambda r: (-1.0, r.uniform(0, 2))),
    ("abs", lambda v, a, b: np.abs(v), lambda r: (0.0, 0.0)),
]
BINARY_OPS = [
    ("add", lambda x, y: x + y),
    ("sub", lambda x, y: x - y),
    ("mul", lambda x, y: x * y),
    ("maximum", np.maximum),
    ("minimum", np.minimum),
    ("gt", lambda x, y: (x > y).astype(np.float64)),  # comparisons: f32 0/1
    ("le", lambda x, y: (x <= y).astype(np.float64)),
]


def _program(rng, n_inputs: int, n_ops: int, binary=tuple(BINARY_OPS)):
    """A random straight-line program over inputs 0..n_inputs-1: (op, args, alpha, beta)."""
    steps = []
    for _ in range(n_ops):
        count = n_inputs + len(steps)
        if rng.random() < 0.6:
            name, _, params = UNARY_OPS[rng.integers(len(UNARY_OPS))]
            steps.append((name, (int(rng.integers(count)),), *params(rng)))
        else:
            name, _ = binary[rng.integers(len(binary))]
            steps.append((name, (int(rng.integers(count)), int(rng.integers(count))), 0.0, 0.0))
    return steps


def _run(dev, steps, inputs, dtype="f32"):
    """Run `steps` on the device; every value (inputs first) as a Buffer, read at the end."""
    values = [dev.upload(x, dtype) for x in inputs]
    for name, args, alpha, beta in steps:
        if len(args) == 1:
            values.append(dev.unary(name, values[args[0]], alpha, beta))
        else:
            values.append(dev.binary(name, values[args[0]], values[args[1]]))
    return values


def _reference(steps, inputs):
    values = [x.astype(np.float64) for x in inputs]
    unary = {name: fn for name, fn, _ in UNARY_OPS}
    binary = dict(BINARY_OPS)
    for name, args, alpha, beta in steps:
        if len(args) == 1:
            values.append(unary[name](values[args[0]], alpha, beta))
        else:
            values.append(binary[name](values[args[0]], values[args[1]]))
    return values


class _Fuse:
    """`with _Fuse(dev, False):` runs op by op."""

    def __init__(self, dev, on: bool):
        self.dev, self.on = dev, on

    def __enter__(self):
        self.dev.synchronize()
        self.saved, self.dev.fuse = self.dev.fuse, self.on

    def __exit__(self, *exc):
        self.dev.synchronize()
        self.dev.fuse = self.saved


@pytest.mark.parametrize("n", [1, 3, 257, 1024, 4099])
@pytest.mark.parametrize("seed", [0, 1, 2])
def test_random_programs_match_numpy_and_the_unfused_run_bit_for_bit(dev, n, seed):
    rng = np.random.default_rng(seed)
    inputs = [rng.standard_normal(n).astype(np.float32) for _ in range(3)]
    steps = _program(rng, 3, 40)
    with _Fuse(dev, True):
        fused = _run(dev, steps, inputs)
        # Read in a shuffled order: reading one value realizes everything pending.
        order = rng.permutation(len(fused))
        got = {int(i): dev.read(fused[i]) for i in order}
    with _Fuse(dev, False):
        plain = [dev.read(b) for b in _run(dev, steps, inputs)]
    want = _reference(steps, inputs)
    for i in range(len(fused)):
        np.testing.assert_array_equal(got[i], plain[i], err_msg=f"value {i}")
        np.testing.assert_allclose(got[i], want[i], rtol=2e-5, atol=2e-5, err_msg=f"value {i}")


TORCH_UNARY = {
    "scale": lambda t, a, b: t * a, "add_scalar": lambda t, a, b: t + a, "relu": lambda t, a, b: torch.relu(t),
    "tanh": lambda t, a, b: torch.tanh(t), "sigmoid": lambda t, a, b: torch.sigmoid(t), "neg": lambda t, a, b: -t,
    "square": lambda t, a, b: t * t, "clamp": lambda t, a, b: torch.clamp(t, a, b), "abs": lambda t, a, b: t.abs(),
}
TORCH_BINARY = {"add": torch.add, "sub": torch.sub, "mul": torch.mul, "maximum": torch.maximum,
                "minimum": torch.minimum}


def _torch_f16_steps(steps, values):
    """Each op of the program in torch CPU, float16 values computed in float32 and rounded to
    float16 (anygpu's f16 rule; torch's own float16 ops round a Python scalar to float16
    first), on the values anygpu computed for its arguments (so rounding differences are not
    amplified along the program)."""
    values = [torch.from_numpy(v).float() for v in values]
    want = []
    for name, args, alpha, beta in steps:
        if len(args) == 1:
            want.append(TORCH_UNARY[name](values[args[0]], alpha, beta).half().numpy())
        else:
            want.append(TORCH_BINARY[name](values[args[0]], values[args[1]]).half().numpy())
    return want


F16_SPECIALS = np.array([np.nan, np.inf, -np.inf, 0.0, -0.0, 65504.0, -65504.0, 6e-8, -3e-5, 1e-4, 300.0, -250.0],
                        np.float16)


def _assert_same_bits(got, want, msg: str = "") -> None:
    """Equal bits, except that a NaN may carry either sign (IEEE leaves the sign of NaN * NaN
    and the like to the hardware and the order a compiler gives the operands)."""
    nan = np.isnan(want)
    np.testing.assert_array_equal(np.isnan(got), nan, err_msg=msg)
    bits = got.view(np.uint16 if got.dtype == np.float16 else np.uint32)
    np.testing.assert_array_equal(bits[~nan], want.view(bits.dtype)[~nan], err_msg=msg)


@pytest.mark.parametrize("n", [1, 7, 12, 1001, 4100])  # scalar and vec4 kernels
@pytest.mark.parametrize("seed", [0, 1, 2])
def test_f16_programs_fuse_and_match_op_by_op_bit_for_bit_and_torch(dev, n, seed):
    """f16 ops fuse (each op's result rounded to f16 as its own kernel's store rounds it) and
    give the op-by-op kernels' bits, NaN, inf, overflow past 65504 and subnormals included."""
    if not dev.supports("f16"):
        pytest.skip("no shader-f16 on this adapter")
    rng = np.random.default_rng(seed)
    inputs = [(rng.standard_normal(n) * 4).astype(np.float16) for _ in range(3)]
    inputs[2] = np.resize(F16_SPECIALS, n)
    inputs[1][::5] = np.float16(40000.0)  # products and sums overflow f16 (not f32)
    steps = _program(rng, 3, 40, [op for op in BINARY_OPS if op[0] not in ("gt", "le")])  # f16 results
    with _Fuse(dev, True):
        first = dict(dev.stats)
        values = _run(dev, steps, inputs, "f16")
        assert all(v._lazy is not None for v in values[3:])  # deferred
        order = rng.permutation(len(values))
        got = {int(i): dev.read(values[i]) for i in order}
        if n > 1:
            assert dev.stats["fused_kernels"] > first["fused_kernels"]
            assert dev.stats["dispatches"] - first["dispatches"] < len(steps)
    with _Fuse(dev, False):
        plain = [dev.read(b) for b in _run(dev, steps, inputs, "f16")]
    for i in range(len(plain)):
        assert got[i].dtype == np.float16
        _assert_same_bits(got[i], plain[i], f"value {i}")
    # Each op against torch CPU float16 (the same rounding per op; tanh and sigmoid may differ
    # in the last bit; f16 subnormals may be flushed by a GPU's f32 arithmetic: compared as 0).
    for i, want in enumerate(_torch_f16_steps(steps, [got[k] for k in range(len(got))]), 3):
        np.testing.assert_allclose(got[i].astype(np.float32), want.astype(np.float32), rtol=2e-3, atol=6.2e-5,
                                   err_msg=f"value {i}: {steps[i - 3]}")


def test_f16_autograd_through_fused_chains_matches_torch(dev, rng):
    if not dev.supports("f16"):
        pytest.skip("no shader-f16 on this adapter")
    data = rng.standard_normal((5, 13)).astype(np.float16)
    other = rng.standard_normal((5, 13)).astype(np.float16)
    x = ag.tensor(data, dtype=ag.float16, requires_grad=True)
    y = ag.tensor(other, dtype=ag.float16, requires_grad=True)
    first = dev.stats["fused_kernels"]
    out = ((x * 1.5 + y).tanh() * (y - 0.25).sigmoid() + x * 0.1).relu()
    (out * out).sum().backward()
    assert dev.stats["fused_kernels"] > first
    tx = torch.tensor(data, requires_grad=True)
    ty = torch.tensor(other, requires_grad=True)
    tout = ((tx * 1.5 + ty).tanh() * (ty - 0.25).sigmoid() + tx * 0.1).relu()
    (tout * tout).sum().backward()
    assert out.dtype == ag.float16 and x.grad.dtype == ag.float16
    np.testing.assert_allclose(out.detach().numpy().astype(np.float32), tout.detach().numpy().astype(np.float32),
                               rtol=4e-3, atol=2e-3)
    np.testing.assert_allclose(x.grad.numpy().astype(np.float32), tx.grad.numpy().astype(np.float32),
                               rtol=2e-2, atol=2e-2)
    np.testing.assert_allclose(y.grad.numpy().astype(np.float32), ty.grad.numpy().astype(np.float32),
                               rtol=2e-2, atol=2e-2)


SPECIALS = np.array([np.nan, np.inf, -np.inf, 0.0, -0.0, 1e38, -1e38, 1e-40, 3.0, -2.5, 88.0, -88.0],
                    np.float32)


@pytest.mark.parametrize("n", [12, 13])  # vec4 and scalar kernels
def test_nan_and_inf_propagate_as_op_by_op(dev, n):
    x = np.resize(SPECIALS, n)
    y = np.resize(SPECIALS[::-1].copy(), n)

    def chain(a, b):
        t = dev.unary("relu", dev.binary("maximum", a, b))
        t = dev.binary("minimum", dev.unary("clamp", t, -5.0, 5.0), dev.unary("exp", a))
        t = dev.unary("log1p", dev.binary("div", t, dev.unary("tanh", b)))
        return [t, dev.unary("pow_scalar", a, 2.0), dev.binary("pow", a, b),
                dev.unary("elu", dev.unary("sigmoid", b), 1.0)]

    with _Fuse(dev, True):
        got = [dev.read(v) for v in chain(dev.upload(x), dev.upload(y))]
    with _Fuse(dev, False):
        plain = [dev.read(v) for v in chain(dev.upload(x), dev.upload(y))]
    for g, p in zip(got, plain):
        np.testing.assert_array_equal(g, p)
    xt, yt = torch.from_numpy(x), torch.from_numpy(y)
    relu_max = torch.relu(torch.maximum(xt, yt))
    want = torch.log1p(torch.minimum(relu_max.clamp(-5, 5), torch.exp(xt)) / torch.tanh(yt)).numpy()
    normal = (np.abs(x) != np.float32(1e-40)) & (np.abs(y) != np.float32(1e-40))  # some GPUs flush subnormals
    np.testing.assert_array_equal(np.isnan(got[0])[normal], np.isnan(want)[normal])


def test_a_chain_is_one_dispatch_and_off_it_is_one_per_op(dev, rng):
    data = rng.standard_normal(1000).astype(np.float32)
    x = dev.upload(data)
    dev.synchronize()
    before = dict(dev.stats)
    y = x
    for k in range(10):
        y = dev.scale(dev.unary("add_scalar", y, 0.5), 1.0 + k / 10)
    np.testing.assert_allclose(dev.read(y), _chain_ref(data), rtol=1e-5)
    assert dev.stats["dispatches"] - before["dispatches"] == 1
    assert dev.stats["fused_ops"] - before["fused_ops"] == 20
    assert dev.stats["fused_kernels"] - before["fused_kernels"] == 1
    with _Fuse(dev, False):
        first = dev.stats["dispatches"]
        y = x
        for k in range(10):
            y = dev.scale(dev.unary("add_scalar", y, 0.5), 1.0 + k / 10)
        dev.read(y)
        assert dev.stats["dispatches"] - first == 20


def _chain_ref(v):
    v = v.astype(np.float64)
    for k in range(10):
        v = (v + 0.5) * (1.0 + k / 10)
    return v


def test_long_chains_become_a_few_kernels(dev, rng):
    data = rng.standard_normal(333).astype(np.float32)
    x = dev.upload(data)
    dev.synchronize()
    first = dev.stats["dispatches"]
    y = x
    for _ in range(1000):  # more than MAX_DEFERRED and many times MAX_NODES
        y = dev.unary("add_scalar", dev.scale(y, 0.999), 0.001)
    got = dev.read(y)
    want = data.astype(np.float64)
    for _ in range(1000):
        want = want * 0.999 + 0.001
    np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-5)
    kernels = dev.stats["dispatches"] - first
    assert 2000 / fusion.MAX_NODES <= kernels <= 2 * 2000 / fusion.MAX_NODES + 8, kernels


def test_many_inputs_split_into_kernels_within_the_binding_limit(dev, rng):
    arrays = [rng.standard_normal(50).astype(np.float32) for _ in range(40)]
    bufs = [dev.upload(a) for a in arrays]
    total = bufs[0]
    for b in bufs[1:]:
        total = dev.add(total, dev.unary("square", b))
    want = arrays[0].astype(np.float64) + sum(a.astype(np.float64) ** 2 for a in arrays[1:])
    np.testing.assert_allclose(dev.read(total), want, rtol=1e-5)


def test_intermediates_held_elsewhere_keep_their_values(dev, rng):
    data = rng.standard_normal(97).astype(np.float32)
    x = dev.upload(data)
    dev.synchronize()
    first = dev.stats["dispatches"]
    y = dev.unary("exp", dev.scale(x, 0.5))  # held
    z = dev.binary("mul", y, y)
    w = dev.unary("add_scalar", y, 1.0)
    got_w = dev.read(w)  # one kernel writes y, z and w
    assert dev.stats["dispatches"] - first == 1
    ref_y = np.exp(0.5 * data.astype(np.float64))
    later = dev.unary("neg", y)  # y is realized now: an input of later work
    np.testing.assert_allclose(got_w, ref_y + 1, rtol=1e-5)
    np.testing.assert_allclose(dev.read(z), ref_y ** 2, rtol=1e-5)
    np.testing.assert_allclose(dev.read(y), ref_y, rtol=1e-5)
    np.testing.assert_allclose(dev.read(later), -ref_y, rtol=1e-5)


def test_results_nobody_holds_still_run(dev, rng):
    x = dev.upload(rng.standard_normal(64).astype(np.float32))
    dev.synchronize()
    first = dev.stats["dispatches"]
    for _ in range(3):
        dev.scale(x, 2.0)  # dropped at once (a timing loop does this): still one kernel each
    dev.synchronize()
    assert dev.stats["dispatches"] - first == 3
    first = dev.stats["dispatches"]
    for _ in range(3):
        dev.unary("exp", dev.scale(x, 2.0))
    dev.synchronize()
    assert dev.stats["dispatches"] - first == 3


def test_pipelines_are_shared_by_chains_with_other_scalars(dev, rng):
    data = rng.standard_normal(1000).astype(np.float32)
    x = dev.upload(data)

    def chain(a, b, c):
        return dev.unary("clamp", dev.unary("add_scalar", dev.scale(dev.unary("tanh", x), a), b), -c, c)

    dev.read(chain(2.0, 0.5, 1.0))
    pipelines = dev.stats["pipelines"]
    for a, b, c in [(3.0, -0.25, 0.5), (-1.0, 4.0, 2.0)]:
        got = dev.read(chain(a, b, c))
        np.testing.assert_allclose(got, np.clip(np.tanh(data.astype(np.float64)) * a + b, -c, c), rtol=1e-5,
                                   atol=1e-6)
    assert dev.stats["pipelines"] == pipelines


def test_host_writes_and_copies_after_pending_reads(dev, rng):
    data = rng.standard_normal(40).astype(np.float32)
    x = dev.upload(data)
    y = dev.scale(x, 2.0)  # pending, reads x
    dev.write(x, np.zeros(40, np.float32))
    np.testing.assert_allclose(dev.read(y), 2 * data, rtol=1e-6)
    z = dev.unary("add_scalar", x, 1.0)  # reads the zeros
    dev.copy(dev.upload(data), x)
    np.testing.assert_allclose(dev.read(z), np.ones(40), rtol=1e-6)


def test_an_optimizer_step_after_a_pending_read_of_the_parameter(dev, rng):
    start = rng.standard_normal(33).astype(np.float32)
    w = ag.tensor(start, requires_grad=True)
    opt = ag.optim.SGD([w], lr=0.5)
    (w * w).sum().backward()  # grad = 2 w
    before = w.detach() * 3.0 + 1.0  # deferred: reads w's buffer
    opt.step()  # updates w in place
    np.testing.assert_allclose(before.numpy(), start * 3 + 1, rtol=1e-6)
    np.testing.assert_allclose(w.detach().numpy(), start - 0.5 * 2 * start, rtol=1e-6)


def test_setitem_after_a_pending_read_of_the_tensor(dev, rng):
    data = rng.standard_normal((4, 5)).astype(np.float32)
    t = ag.tensor(data)
    doubled = t * 2.0
    shifted = (t + 1.0).exp()
    t[1:3] = 0.0
    np.testing.assert_allclose(doubled.numpy(), data * 2, rtol=1e-6)
    np.testing.assert_allclose(shifted.numpy(), np.exp(data.astype(np.float64) + 1), rtol=1e-5)
    assert (t.numpy()[1:3] == 0).all()


def test_autograd_through_fused_chains_matches_torch(rng):
    data = rng.standard_normal((7, 9)).astype(np.float32)
    other = rng.standard_normal((7, 9)).astype(np.float32)
    x, y = ag.tensor(data, requires_grad=True), ag.tensor(other, requires_grad=True)
    out = ((x * 1.5 + y).tanh() * (y - 0.25).sigmoid() + x.exp() * 0.1).relu()
    (out * out).sum().backward()
    tx, ty = torch.tensor(data, requires_grad=True), torch.tensor(other, requires_grad=True)
    tout = ((tx * 1.5 + ty).tanh() * (ty - 0.25).sigmoid() + tx.exp() * 0.1).relu()
    (tout * tout).sum().backward()
    np.testing.assert_allclose(out.detach().numpy(), tout.detach().numpy(), rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(x.grad.numpy(), tx.grad.numpy(), rtol=1e-4, atol=1e-5)
    np.testing.assert_allclose(y.grad.numpy(), ty.grad.numpy(), rtol=1e-4, atol=1e-5)


def test_captured_steps_with_fused_ops_replay_exactly(rng):
    w = ag.tensor(rng.standard_normal(64).astype(np.float32), requires_grad=True)
    opt = ag.optim.SGD([w], lr=0.1)

    def step(x):
        opt.zero_grad()
        loss = (((w * x + 0.5).tanh() - x) ** 2).mean()
        loss.backward()
        opt.step()
        return loss.detach() * 1.0

    compiled = ag.compile(step)
    eager_w = ag.tensor(w.detach().numpy(), requires_grad=True)
    eager_opt = ag.optim.SGD([eager_w], lr=0.1)
    for i in range(5):
        x = ag.tensor(rng.standard_normal(64).astype(np.float32))
        got = compiled(x)
        eager_opt.zero_grad()
        loss = (((eager_w * x + 0.5).tanh() - x) ** 2).mean()
        loss.backward()
        eager_opt.step()
        np.testing.assert_allclose(got.numpy(), loss.detach().numpy(), rtol=1e-5)
        np.testing.assert_allclose(w.detach().numpy(), eager_w.detach().numpy(), rtol=1e-5, atol=1e-6)
    assert compiled.stats["replayed"] >= 2


def test_errors_surface_at_the_call_and_nothing_is_deferred(dev, rng):
    a = dev.upload(np.ones(5, np.float32))
    b = dev.upload(np.ones(6, np.float32))
    dev.synchronize()
    with pytest.raises(ValueError, match="add: a has 5 elements but b has 6"):
        dev.add(a, b)
    with pytest.raises(ValueError, match="'nope' is not defined for f32"):
        dev.unary("nope", a)
    with pytest.raises(ValueError, match="mul: a is f32 but b is i32"):
        dev.binary("mul", a, dev.upload(np.ones(5, np.int32)))
    with pytest.raises(ValueError, match="must be a Buffer"):
        dev.unary("relu", np.ones(5, np.float32))
    assert not dev._lazy


def test_a_failing_fused_kernel_raises_gpu_error_and_the_device_recovers(dev, monkeypatch):
    x = dev.upload(np.arange(8, dtype=np.float32))
    y = dev.unary("neg", dev.unary("sigmoid", x))
    monkeypatch.setattr(fusion, "_SOURCES", {})
    real = fusion._generate
    monkeypatch.setattr(fusion, "_generate", lambda *args: ("not wgsl", *real(*args)[1:]))
    with pytest.raises(GpuError):
        dev.read(y)
    monkeypatch.setattr(fusion, "_generate", real)
    monkeypatch.setattr(fusion, "_SOURCES", {})
    assert not dev._lazy and y._lazy is None
    z = dev.unary("neg", dev.unary("sigmoid", x))
    np.testing.assert_allclose(dev.read(z), -1 / (1 + np.exp(-np.arange(8))), rtol=1e-6)


def test_anygpu_fuse_0_turns_deferral_off(monkeypatch):
    monkeypatch.setenv("ANYGPU_FUSE", "0")
    dev = Device()
    assert dev.fuse is False
    x = dev.upload(np.ones(10, np.float32))
    y = dev.scale(x, 2.0)
    assert y._lazy is None and not dev._lazy and dev.stats["dispatches"] == 1
    monkeypatch.setenv("ANYGPU_FUSE", "1")
    assert Device().fuse is True


def test_taking_a_buffers_wgpu_handle_realizes_pending_work_first(dev, rng):
    """Code outside the runtime that records its own commands on `buf._gpu` (host staging,
    compiled steps' input copies) must find every read of that buffer already recorded."""
    data = rng.standard_normal(16).astype(np.float32)
    x = dev.upload(data)
    y = dev.unary("exp", dev.scale(x, 2.0))  # pending, reads x
    handle = x._gpu
    assert y._lazy is None and not dev._lazy
    dev._pending.append(("copy", dev.upload(np.zeros(16, np.float32))._gpu, 0, handle, 0, 64))  # x = 0
    np.testing.assert_allclose(dev.read(y), np.exp(2 * data.astype(np.float64)), rtol=1e-6)
    np.testing.assert_array_equal(dev.read(x), np.zeros(16, np.float32))


def test_empty_buffers_defer_and_realize_to_nothing(dev):
    x = dev.upload(np.zeros(0, np.float32))
    first = dev.stats["dispatches"]
    y = dev.unary("exp", dev.scale(x, 2.0))
    z = dev.add(y, x)
    assert dev.read(z).shape == (0,) and dev.read(y).shape == (0,)
    assert dev.stats["dispatches"] == first


def test_a_fused_kernel_past_65535_workgroups_covers_the_tail(dev):
    """An odd length (scalar kernel) of 65535*256 + 1001 elements needs a folded 2-D grid."""
    n = 65535 * 256 + 1001
    x = np.arange(n, dtype=np.float32) % 1021 - 510
    out = dev.read(dev.unary("add_scalar", dev.scale(dev.upload(x), 2.0), 1.0))
    np.testing.assert_array_equal(out[-5000:], 2 * x[-5000:] + 1)
    np.testing.assert_array_equal(out[::4099], 2 * x[::4099] + 1)
