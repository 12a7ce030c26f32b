"""copy.deepcopy of tensors, state dicts and optimizer state, as torch allows
(`best = copy.deepcopy(model.state_dict())`); pickling is refused with a clear error."""

import copy
import pickle

import numpy as np
import pytest
import torch

import anygpu as ag
from anygpu import nn, optim


def test_deepcopy_is_an_independent_leaf_with_grad(rng):
    data = rng.standard_normal((3, 5)).astype(np.float32)
    x = ag.tensor(data, requires_grad=True)
    (x * x).sum().backward()
    y = copy.deepcopy(x)
    ref = torch.tensor(data, requires_grad=True)
    (ref * ref).sum().backward()
    ref_copy = copy.deepcopy(ref)
    assert y.requires_grad == ref_copy.requires_grad and y.is_leaf
    np.testing.assert_array_equal(y.numpy(), ref_copy.detach().numpy())
    np.testing.assert_allclose(y.grad.numpy(), ref_copy.grad.numpy(), rtol=1e-6)
    with ag.no_grad():
        x.mul_(0.0)  # the copy keeps its own data
    np.testing.assert_array_equal(y.numpy(), data)


def test_deepcopy_keeps_dtype_shape_and_empty(rng):
    for t in (ag.zeros(0), ag.tensor(np.array([1, -2, 3], np.int32)), ag.ones(2, 3).half(), ag.tensor(2.5),
              ag.tensor([True, False])):
        c = copy.deepcopy(t)
        assert c.dtype == t.dtype and c.shape == t.shape
        np.testing.assert_array_equal(c.numpy(), t.numpy())


def test_deepcopy_of_a_non_leaf_is_refused_like_torch():
    x = ag.ones(2, requires_grad=True)
    with pytest.raises(RuntimeError, match="graph leaves"):
        copy.deepcopy(x * 2)
    with pytest.raises(RuntimeError):
        copy.deepcopy(torch.ones(2, requires_grad=True) * 2)


def test_deepcopy_of_state_dicts_and_shared_tensors(rng):
    model = nn.Sequential(nn.Linear(4, 3), nn.BatchNorm1d(3))
    opt = optim.Adam(model.parameters(), lr=0.1)
    model(ag.tensor(rng.standard_normal((5, 4)).astype(np.float32))).sum().backward()
    opt.step()
    best = copy.deepcopy(model.state_dict())
    state = copy.deepcopy(opt.state_dict())
    before = {k: v.numpy().copy() for k, v in model.state_dict().items()}
    opt.step()  # changes the model, not the copies
    for key, value in best.items():
        np.testing.assert_array_equal(value.numpy(), before[key])
    model.load_state_dict(best)
    for key, value in model.state_dict().items():
        np.testing.assert_array_equal(value.numpy(), before[key])
    assert state["param_groups"][0]["lr"] == 0.1 and len(state["state"]) == 4
    shared = ag.ones(3)
    pair = copy.deepcopy([shared, shared])  # one tensor twice stays one copy
    assert pair[0] is pair[1] and pair[0] is not shared


def test_pickling_a_tensor_says_what_to_use():
    with pytest.raises(TypeError, match="anygpu.save"):
        pickle.dumps(ag.ones(2))
