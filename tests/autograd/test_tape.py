"""The Tape: the seed's tests (any-gpu autograd.rs) with the same inputs, expected numbers
and tolerances, then the Tape's own behaviour and its answers to bad input."""

import math

import numpy as np
import pytest

import anygpu as ag
from anygpu.autograd import Tape, TensorId


def assert_approx(actual, expected, tol):
    """The seed's assert_approx: same length, every |actual - expected| < tol."""
    actual = np.asarray(actual, dtype=np.float64)
    expected = np.asarray(expected, dtype=np.float64)
    assert actual.shape == expected.shape, f"{actual.shape} != {expected.shape}"
    assert np.all(np.abs(actual - expected) < tol), f"{actual} != {expected} (tol {tol})"


# ---------------------------------------------------------------- the seed's tests

def test_backward_add(dev):
    tape = Tape(dev)
    a = tape.leaf([1.0, 2.0, 3.0])
    b = tape.leaf([4.0, 5.0, 6.0])
    c = tape.add(a, b)
    target = tape.leaf([0.0, 0.0, 0.0])
    loss = tape.mse_loss(c, target)
    tape.backward(loss)
    # MSE = (5^2 + 7^2 + 9^2)/3 = 155/3
    assert_approx(tape.read(loss), [155.0 / 3.0], 1e-3)
    # d(MSE)/d(pred) = 2*[5,7,9]/3, and d(pred)/d(a) = d(pred)/d(b) = 1
    assert_approx(tape.read_grad(a), [10.0 / 3.0, 14.0 / 3.0, 18.0 / 3.0], 1e-3)
    assert_approx(tape.read_grad(b), [10.0 / 3.0, 14.0 / 3.0, 18.0 / 3.0], 1e-3)


def test_backward_mul(dev):
    tape = Tape(dev)
    a = tape.leaf([2.0, 3.0])
    b = tape.leaf([4.0, 5.0])
    c = tape.mul(a, b)  # [8, 15]
    target = tape.leaf([0.0, 0.0])
    loss = tape.mse_loss(c, target)
    tape.backward(loss)
    assert_approx(tape.read(loss), [144.5], 1e-3)  # (64 + 225)/2
    # d(MSE)/d(c) = [8, 15]; grad_a = [8,15]*[4,5], grad_b = [8,15]*[2,3]
    assert_approx(tape.read_grad(a), [32.0, 75.0], 1e-3)
    assert_approx(tape.read_grad(b), [16.0, 45.0], 1e-3)


def test_backward_matmul(dev):
    tape = Tape(dev)
    a = tape.leaf([1.0, 2.0])  # 1x2
    b = tape.leaf([3.0, 4.0])  # 2x1
    c = tape.matmul(a, b, 1, 1, 2)  # [[11]]
    target = tape.leaf([0.0])
    loss = tape.mse_loss(c, target)
    tape.backward(loss)
    assert_approx(tape.read(loss), [121.0], 1e-3)
    # d(MSE)/d(c) = 22; grad_a = 22 * [3, 4], grad_b = [1, 2] * 22
    assert_approx(tape.read_grad(a), [66.0, 88.0], 1e-3)
    assert_approx(tape.read_grad(b), [22.0, 44.0], 1e-3)


def test_backward_relu(dev):
    tape = Tape(dev)
    a = tape.leaf([-1.0, 2.0, -3.0, 4.0])
    b = tape.relu(a)  # [0, 2, 0, 4]
    target = tape.leaf([0.0, 0.0, 0.0, 0.0])
    loss = tape.mse_loss(b, target)
    tape.backward(loss)
    assert_approx(tape.read(loss), [5.0], 1e-3)
    assert_approx(tape.read_grad(a), [0.0, 1.0, 0.0, 2.0], 1e-3)


def test_backward_scale(dev):
    tape = Tape(dev)
    a = tape.leaf([1.0, 2.0, 3.0])
    b = tape.scale(a, 3.0)
    target = tape.leaf([0.0, 0.0, 0.0])
    loss = tape.mse_loss(b, target)
    tape.backward(loss)
    assert_approx(tape.read_grad(a), [6.0, 12.0, 18.0], 1e-3)


def test_backward_sub(dev):
    tape = Tape(dev)
    a = tape.leaf([5.0, 10.0])
    b = tape.leaf([1.0, 2.0])
    c = tape.sub(a, b)  # [4, 8]
    target = tape.leaf([0.0, 0.0])
    loss = tape.mse_loss(c, target)
    tape.backward(loss)
    assert_approx(tape.read_grad(a), [4.0, 8.0], 1e-3)
    assert_approx(tape.read_grad(b), [-4.0, -8.0], 1e-3)


def test_backward_sigmoid(dev):
    tape = Tape(dev)
    a = tape.leaf([0.0, 1.0, -1.0])
    b = tape.sigmoid(a)
    target = tape.leaf([0.0, 0.0, 0.0])
    loss = tape.mse_loss(b, target)
    tape.backward(loss)
    s = np.array([0.5, 0.7311, 0.2689], np.float32)
    expected = [2.0 * s[i] / 3.0 * s[i] * (1.0 - s[i]) for i in range(3)]
    assert_approx(tape.read_grad(a), expected, 1e-3)


def test_backward_tanh(dev):
    tape = Tape(dev)
    a = tape.leaf([0.0, 1.0, -1.0])
    b = tape.tanh_act(a)
    target = tape.leaf([0.0, 0.0, 0.0])
    loss = tape.mse_loss(b, target)
    tape.backward(loss)
    t = np.array([0.0, 0.7616, -0.7616], np.float32)
    expected = [2.0 * t[i] / 3.0 * (1.0 - t[i] * t[i]) for i in range(3)]
    assert_approx(tape.read_grad(a), expected, 1e-2)


def test_backward_swish(dev):
    tape = Tape(dev)
    a = tape.leaf([0.0, 1.0, -1.0])
    b = tape.swish(a)
    target = tape.leaf([0.0, 0.0, 0.0])
    loss = tape.mse_loss(b, target)
    tape.backward(loss)
    x = [0.0, 1.0, -1.0]
    sw = [v / (1.0 + math.exp(-v)) for v in x]
    expected = []
    for i in range(3):
        s = 1.0 / (1.0 + math.exp(-x[i]))
        d_swish = s + x[i] * s * (1.0 - s)
        expected.append(2.0 * sw[i] / 3.0 * d_swish)
    assert_approx(tape.read_grad(a), expected, 1e-2)


def test_read_grad_before_backward(dev):
    tape = Tape(dev)
    a = tape.leaf([1.0, 2.0])
    assert tape.read_grad(a) is None


def test_backward_non_scalar_loss(dev):
    tape = Tape(dev)
    a = tape.leaf([1.0, 2.0])
    with pytest.raises(ValueError):
        tape.backward(a)


def test_backward_diamond_graph(dev):
    # a -> b = 2a, a -> c = 3a, d = b + c: a gets gradient along both paths
    tape = Tape(dev)
    a = tape.leaf([1.0])
    b = tape.scale(a, 2.0)
    c = tape.scale(a, 3.0)
    d = tape.add(b, c)  # 5
    target = tape.leaf([0.0])
    loss = tape.mse_loss(d, target)
    tape.backward(loss)
    # d(MSE)/d(d) = 10; a: 10*2 + 10*3 = 50
    assert_approx(tape.read_grad(a), [50.0], 1e-3)


def test_tape_leaf_data_roundtrip(dev):
    tape = Tape(dev)
    data = [1.5, -2.7, 0.0, 99.9]
    a = tape.leaf(data)
    np.testing.assert_array_equal(tape.read(a), np.array(data, np.float32))


def test_tape_conv2d_forward(dev):
    # 1x1x3x3 input, 1x1x1x1 weight = 1, bias = 0 -> output == input
    tape = Tape(dev)
    input_data = [float(x) for x in range(1, 10)]
    inp = tape.leaf(input_data)
    w = tape.leaf([1.0])
    b = tape.leaf([0.0])
    out = tape.conv2d(inp, w, b, 1, 1, 3, 3, 1, 1, 1, (1, 1), (0, 0), (1, 1), 1)
    assert_approx(tape.read(out), input_data, 1e-5)


def _seed_conv_loss(dev, input_data, weight_data):
    tape = Tape(dev)
    inp = tape.leaf(input_data)
    w = tape.leaf(weight_data)
    out = tape.conv2d(inp, w, None, 1, 1, 3, 3, 1, 1, 1, (1, 1), (0, 0), (1, 1), 1)
    target = tape.leaf([0.0] * 9)
    loss = tape.mse_loss(out, target)
    return tape, inp, w, loss


def test_tape_conv2d_backward_weight_grad(dev):
    eps = np.float32(1e-3)
    input_data = np.arange(1, 10, dtype=np.float32) * np.float32(0.1)
    weight_data = np.array([0.5], np.float32)

    tape, _, w, loss = _seed_conv_loss(dev, input_data, weight_data)
    tape.backward(loss)
    gw = tape.read_grad(w)

    def loss_at(w_val):
        t, _, _, l = _seed_conv_loss(dev, input_data, [w_val])
        return t.read(l)[0]

    numeric = (loss_at(weight_data[0] + eps) - loss_at(weight_data[0] - eps)) / (np.float32(2.0) * eps)
    assert abs(gw[0] - numeric) < 1e-2, f"weight grad: analytical={gw[0]}, numeric={numeric}"


def test_tape_conv2d_backward_input_grad(dev):
    eps = np.float32(1e-3)
    input_data = np.arange(1, 10, dtype=np.float32) * np.float32(0.1)
    weight_data = [0.5]

    def loss_at(x_val, idx):
        inp_data = input_data.copy()
        inp_data[idx] = x_val
        t, _, _, l = _seed_conv_loss(dev, inp_data, weight_data)
        return t.read(l)[0]

    tape, inp, _, loss = _seed_conv_loss(dev, input_data, weight_data)
    tape.backward(loss)
    gi = tape.read_grad(inp)
    for i in range(9):
        numeric = (loss_at(input_data[i] + eps, i) - loss_at(input_data[i] - eps, i)) / (np.float32(2.0) * eps)
        assert abs(gi[i] - numeric) < 1e-2, f"input grad[{i}]: analytical={gi[i]}, numeric={numeric}"


def test_tape_conv2d_backward_bias_grad(dev):
    # 1x1x2x2 input, 1x1x1x1 kernel = 1, bias 0: out = input; grad_bias = sum(out/2) = 5
    tape = Tape(dev)
    inp = tape.leaf([1.0, 2.0, 3.0, 4.0])
    w = tape.leaf([1.0])
    b = tape.leaf([0.0])
    out = tape.conv2d(inp, w, b, 1, 1, 2, 2, 1, 1, 1, (1, 1), (0, 0), (1, 1), 1)
    target = tape.leaf([0.0] * 4)
    loss = tape.mse_loss(out, target)
    tape.backward(loss)
    assert_approx(tape.read_grad(b), [5.0], 1e-3)


# ---------------------------------------------------------------- the Tape's own behaviour

def test_public_names(dev):
    assert ag.autograd.Tape is Tape
    from anygpu.autograd import Entry, reverse_walk  # noqa: F401 (the one engine, re-exported)


def test_value_used_three_times_accumulates(dev):
    # loss = mean((a*a + a)^2) with a used by mul twice and by add once
    tape = Tape(dev)
    a_data = np.array([0.5, -1.5, 2.0], np.float32)
    a = tape.leaf(a_data)
    y = tape.add(tape.mul(a, a), a)
    loss = tape.mse_loss(y, tape.leaf(np.zeros(3)))
    tape.backward(loss)
    x = a_data.astype(np.float64)
    expected = 2 * (x * x + x) / 3 * (2 * x + 1)
    np.testing.assert_allclose(tape.read_grad(a), expected, rtol=1e-5)


def test_intermediate_values_keep_their_gradients(dev):
    tape = Tape(dev)
    a = tape.leaf([1.0, -2.0])
    h = tape.scale(a, 3.0)
    loss = tape.mse_loss(h, tape.leaf([0.0, 0.0]))
    tape.backward(loss)
    np.testing.assert_allclose(tape.read_grad(h), [3.0, -6.0], rtol=1e-6)
    np.testing.assert_allclose(tape.read_grad(loss), [1.0])


def test_mse_loss_multiplies_by_its_incoming_gradient(dev):
    # The loss is not always the last op: scale(mse, 4) must give 4x the gradients.
    tape = Tape(dev)
    p = tape.leaf([1.0, 2.0])
    t = tape.leaf([0.0, 1.0])
    loss = tape.scale(tape.mse_loss(p, t), 4.0)
    tape.backward(loss)
    np.testing.assert_allclose(tape.read_grad(p), [4.0, 4.0], rtol=1e-6)   # 4 * 2 (p - t) / 2
    np.testing.assert_allclose(tape.read_grad(t), [-4.0, -4.0], rtol=1e-6)


def test_requires_grad_false_leaf_gets_no_gradient_and_skips_recording(dev):
    tape = Tape(dev)
    x = tape.leaf([1.0, 2.0], requires_grad=False)
    w = tape.leaf([3.0, 4.0])
    doubled = tape.scale(x, 2.0)   # nothing here wants a gradient: not recorded
    assert tape.entries == ()
    loss = tape.mse_loss(tape.mul(doubled, w), tape.leaf([0.0, 0.0], requires_grad=False))
    tape.backward(loss)
    assert tape.read_grad(x) is None and tape.read_grad(doubled) is None
    np.testing.assert_allclose(tape.read_grad(w), [2 * 6.0 / 2 * 2, 2 * 16.0 / 2 * 4], rtol=1e-6)


def test_second_backward_replaces_gradients(dev):
    tape = Tape(dev)
    a = tape.leaf([1.0, 2.0, 3.0])
    loss = tape.mse_loss(tape.relu(a), tape.leaf([0.0, 0.0, 0.0]))
    tape.backward(loss)
    first = tape.read_grad(a)
    tape.backward(loss)
    np.testing.assert_array_equal(tape.read_grad(a), first)


def test_backward_from_an_intermediate_scalar(dev):
    tape = Tape(dev)
    a = tape.leaf([2.0])
    b = tape.scale(a, 5.0)
    c = tape.mse_loss(b, tape.leaf([1.0]))  # (10 - 1)^2 = 81
    tape.backward(b)
    np.testing.assert_allclose(tape.read_grad(a), [5.0])
    assert tape.read_grad(c) is None


def test_leaf_takes_numpy_of_any_dtype_and_buffers(dev):
    tape = Tape(dev)
    ints = tape.leaf(np.array([[1, 2], [3, 4]], np.int32))
    np.testing.assert_array_equal(tape.read(ints), np.array([1, 2, 3, 4], np.float32))
    buf = dev.upload(np.array([0.25, 0.5], np.float32))
    wrapped = tape.leaf(buf)
    assert tape.buffer(wrapped) is buf
    loss = tape.mse_loss(wrapped, tape.leaf([0.0, 0.0]))
    tape.backward(loss)
    np.testing.assert_allclose(dev.read(tape.grad_buffer(wrapped)), [0.25, 0.5])


def test_conv2d_without_bias_gets_no_bias_gradient_slot(dev):
    tape = Tape(dev)
    x = tape.leaf(np.ones(2 * 4 * 4))
    w = tape.leaf(np.full(3 * 2 * 3 * 3, 0.1))
    out = tape.conv2d(x, w, None, 1, 2, 4, 4, 3, 3, 3, 1, 1, 1, 1)
    assert len(tape.read(out)) == 3 * 4 * 4
    tape.backward(tape.mse_loss(out, tape.leaf(np.zeros(48))))
    assert tape.read_grad(w).shape == (54,) and tape.read_grad(x).shape == (32,)


# ---------------------------------------------------------------- bad input

def test_non_scalar_loss_names_sizes_and_tape_still_works(dev):
    tape = Tape(dev)
    a = tape.leaf([1.0, 2.0, 3.0])
    b = tape.relu(a)
    with pytest.raises(ValueError, match=r"backward: loss must be a scalar.*3 elements"):
        tape.backward(b)
    loss = tape.mse_loss(b, tape.leaf([0.0, 0.0, 0.0]))
    tape.backward(loss)
    np.testing.assert_allclose(tape.read_grad(a), [2 / 3, 4 / 3, 2.0], rtol=1e-6)


def test_foreign_id_is_refused_naming_it(dev):
    first, second = Tape(dev), Tape(dev)
    mine = second.leaf([1.0])
    foreign = first.leaf([1.0])
    with pytest.raises(ValueError, match=r"add: b is TensorId\(index=0, tape=\d+\), which belongs to another tape"):
        second.add(mine, foreign)
    for call in (lambda: second.read(foreign), lambda: second.read_grad(foreign),
                 lambda: second.backward(foreign)):
        with pytest.raises(ValueError, match="another tape"):
            call()
    assert len(second) == 1


def test_unknown_and_wrong_type_ids_are_refused(dev):
    tape = Tape(dev)
    a = tape.leaf([1.0])
    ghost = TensorId(7, a.tape)
    with pytest.raises(ValueError, match=r"relu: a is TensorId\(index=7.*not on this tape \(it holds 1 values\)"):
        tape.relu(ghost)
    with pytest.raises(ValueError, match="scale: a must be a TensorId of this tape, got int 0"):
        tape.scale(0, 2.0)
    with pytest.raises(ValueError, match="conv2d: bias must be a TensorId"):
        tape.conv2d(a, a, 3, 1, 1, 1, 1, 1, 1, 1)


def test_shape_mismatch_raises_from_the_op_and_records_nothing(dev):
    tape = Tape(dev)
    a = tape.leaf([1.0, 2.0, 3.0])
    b = tape.leaf([1.0, 2.0, 3.0, 4.0])
    with pytest.raises(ValueError, match="add: a has 3 elements but b has 4"):
        tape.add(a, b)
    with pytest.raises(ValueError, match="matmul"):
        tape.matmul(a, b, 2, 2, 2)
    with pytest.raises(ValueError, match="conv2d: weight has 4 elements"):
        tape.conv2d(a, b, None, 1, 1, 1, 3, 1, 1, 1)
    with pytest.raises(ValueError, match="group_norm"):
        tape.group_norm(b, a, a, 1, 2, 2, 1)
    assert len(tape) == 2 and tape.entries == ()
    # The tape and the device keep working.
    c = tape.mul(a, a)
    loss = tape.mse_loss(c, tape.leaf([0.0, 0.0, 0.0]))
    tape.backward(loss)
    x = np.array([1.0, 2.0, 3.0])
    np.testing.assert_allclose(tape.read_grad(a), 2 * x * x / 3 * 2 * x, rtol=1e-5)
    np.testing.assert_allclose(dev.read(dev.add(dev.upload([1.0]), dev.upload([2.0]))), [3.0])
