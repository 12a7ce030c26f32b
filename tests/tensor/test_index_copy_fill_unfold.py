"""Tensor.index_fill / index_copy / masked_scatter / unfold (and their torch.* and in-place forms)
against torch on the CPU: values and gradients on random data with odd sizes, negative dims and
indices, overlapping and empty windows, 0-d tensors, integer tensors; bad arguments as ValueErrors, indices out of range as IndexErrors (torch's)."""

import numpy as np
import pytest
import torch

import anygpu as ag

from .helper import check_op, close


@pytest.mark.parametrize("dim,index", [(0, [4, 0, -1]), (1, [2]), (-1, [6, 1, 1]), (2, [])])
def test_index_fill_matches_torch(dim, index):
    check_op([(5, 3, 7)], lambda x: x.index_fill(dim, torch.tensor(index, dtype=torch.int64), -2.5),
             lambda x: x.index_fill(dim, ag.tensor(np.array(index, np.int64)), -2.5))


def test_index_fill_with_a_tensor_value_and_in_place():
    rng = np.random.default_rng(1)
    data = rng.standard_normal((4, 9)).astype(np.float32)
    results = []
    for lib in (torch, ag):
        x = lib.tensor(data, requires_grad=True)
        value = lib.tensor(np.float32(1.5), requires_grad=True)
        y = x * 1.0
        y.index_fill_(1, lib.tensor(np.array([8, 3])), value)
        (y * y).sum().backward()
        results.append((y, x.grad, value.grad))
    for ours, theirs in zip(results[1], results[0]):
        close(ours.detach().numpy(), theirs.detach().numpy())
    ints = ag.tensor(np.arange(12, dtype=np.int32).reshape(3, 4))
    assert ints.index_fill(0, ag.tensor([1]), 7).numpy().tolist() == \
        torch.arange(12).reshape(3, 4).index_fill(0, torch.tensor([1]), 7).tolist()
    assert ag.tensor(2.0).index_fill(0, ag.tensor([0]), 9.0).item() == 9.0


@pytest.mark.parametrize("dim,index", [(0, [3, 0]), (1, [4, 1, 0, 2]), (-1, [5])])
def test_index_copy_matches_torch(dim, index):
    shape = [4, 5, 6]
    shape[dim] = len(index)
    check_op([(4, 5, 6), tuple(shape)],
             lambda x, s: x.index_copy(dim, torch.tensor(index, dtype=torch.int64), s),
             lambda x, s: ag.index_copy(x, dim, ag.tensor(np.array(index, np.int64)), s))


def test_index_copy_in_place_and_errors():
    x = ag.zeros(3, 4)
    x.index_copy_(0, ag.tensor([2]), ag.ones(1, 4) * 5)
    assert x.numpy()[2].tolist() == [5.0] * 4 and x.numpy()[:2].sum() == 0
    with pytest.raises(ValueError, match="index_copy: source of shape"):
        ag.zeros(2, 3).index_copy(1, ag.tensor([0]), ag.ones(2, 2))
    with pytest.raises(ValueError, match="index_fill: index must be 1-D"):
        ag.zeros(2, 3).index_fill(1, ag.tensor([[0]]), 1.0)
    with pytest.raises(IndexError, match="index_fill: index 3 is out of bounds"):  # as torch
        ag.zeros(2, 3).index_fill(1, ag.tensor([3]), 1.0)
    for bad in (-1, 2):  # torch's index_copy refuses negative indices (index_fill wraps them)
        with pytest.raises(IndexError, match=f"index_copy: index {bad} is out of bounds"):
            ag.zeros(2, 3).index_copy(0, ag.tensor([bad]), ag.ones(1, 3))


@pytest.mark.parametrize("mask_shape", [(3, 7), (7,), (3, 1)])
def test_masked_scatter_matches_torch(mask_shape):
    rng = np.random.default_rng(2)
    mask = rng.random(mask_shape) < 0.5
    mask.flat[0] = True
    check_op([(3, 7), (25,)], lambda x, s: x.masked_scatter(torch.tensor(mask), s),
             lambda x, s: ag.masked_scatter(x, ag.tensor(mask), s))


def test_masked_scatter_edges():
    x = ag.tensor(np.arange(4, dtype=np.float32), requires_grad=True)
    y = x.masked_scatter(ag.tensor(np.zeros(4, bool)), ag.tensor([1.0]))  # no position: x itself
    y.sum().backward()
    assert y.numpy().tolist() == [0, 1, 2, 3] and x.grad.numpy().tolist() == [1.0] * 4
    with pytest.raises(ValueError, match="fewer than the mask's 3"):
        ag.zeros(4).masked_scatter(ag.tensor(np.array([1, 1, 0, 1], bool)), ag.tensor([1.0, 2.0]))
    with pytest.raises(ValueError, match="bool"):
        ag.zeros(4).masked_scatter(ag.tensor([1, 0, 0, 1]), ag.ones(4))
    z = ag.zeros(2, 2)
    z.masked_scatter_(ag.tensor(np.array([[True, False], [False, True]])), ag.tensor([3.0, 4.0]))
    assert z.numpy().tolist() == [[3.0, 0.0], [0.0, 4.0]]


@pytest.mark.parametrize("dim,size,step", [(0, 2, 1), (1, 3, 2), (-1, 1, 3), (2, 5, 1), (1, 0, 2), (1, 7, 1)])
def test_unfold_matches_torch(dim, size, step):
    """Overlapping windows (step < size) sum their gradients, as torch's."""
    check_op([(4, 7, 5)], lambda x: x.unfold(dim, size, step))


def test_unfold_edges_and_errors():
    assert ag.tensor(3.0).unfold(0, 1, 1).numpy().tolist() == torch.tensor(3.0).unfold(0, 1, 1).tolist()
    assert ag.tensor(3.0).unfold(0, 0, 1).shape == tuple(torch.tensor(3.0).unfold(0, 0, 1).shape)
    ints = ag.tensor(np.arange(10, dtype=np.int32))
    assert ints.unfold(0, 4, 3).numpy().tolist() == torch.arange(10).unfold(0, 4, 3).tolist()
    with pytest.raises(ValueError, match=r"unfold: size must be in \[0, 3\]"):
        ag.zeros(2, 3).unfold(1, 4, 1)
    with pytest.raises(ValueError, match="unfold: step must be positive"):
        ag.zeros(2, 3).unfold(1, 2, 0)


@pytest.mark.parametrize("size,stride,offset", [((3, 4), (2, 1), None), ((2, 3, 2), (1, 3, 5), 2), ((5,), (0,), 7),
                                                ((2, 2), (1, 1), 0), ((), (), 3)])
def test_as_strided_matches_torch(size, stride, offset):
    """Overlapping and broadcast (stride 0) windows over a contiguous tensor, gradients summed."""
    check_op([(2, 3, 4)], lambda x: x.as_strided(size, stride, offset),
             lambda x: ag.as_strided(x, size, stride, offset))


def test_as_strided_errors_and_empty():
    assert ag.zeros(6).as_strided((2, 0), (1, 1)).shape == (2, 0)
    with pytest.raises(ValueError, match="as_strided: size .* reach element 10 of a tensor of 10 elements"):
        ag.zeros(10).as_strided((3, 4), (3, 1), 1)
    with pytest.raises(ValueError, match="as_strided: size .* must have the same length"):
        ag.zeros(10).as_strided((3, 4), (1,))
    with pytest.raises(ValueError, match="must not be negative"):
        ag.zeros(10).as_strided((3,), (-1,))
