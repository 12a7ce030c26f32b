"""Conv1d, BatchNorm1d, MaxPool1d, AvgPool1d and their functional forms against torch:
forward values and gradients (odd lengths, strides, padding, groups), running statistics."""

import pathlib
import sys

import numpy as np
import pytest
import torch

import anygpu as ag
from anygpu import nn

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[1]))
from tensor.helper import check_op  # noqa: E402  (the one torch-oracle helper)

torch.set_num_threads(1)

CONV_CASES = [
    dict(in_channels=3, out_channels=5, kernel_size=3),
    dict(in_channels=4, out_channels=6, kernel_size=5, stride=2, padding=2, dilation=1, groups=2),
    dict(in_channels=2, out_channels=3, kernel_size=3, padding="same", dilation=2, bias=False),
    dict(in_channels=3, out_channels=3, kernel_size=(4,), stride=(3,), padding=(1,), groups=3),
]


@pytest.mark.parametrize("kwargs", CONV_CASES, ids=[str(i) for i in range(len(CONV_CASES))])
@pytest.mark.parametrize("batched", [True, False])
def test_conv1d_module(kwargs, batched):
    torch.manual_seed(0)
    theirs = torch.nn.Conv1d(**kwargs)
    ours = nn.Conv1d(**kwargs)
    assert [(n, tuple(p.shape)) for n, p in ours.named_parameters()] == \
        [(n, tuple(p.shape)) for n, p in theirs.named_parameters()]
    assert repr(ours) == repr(theirs)
    ours.load_state_dict(theirs.state_dict())
    shape = (2, kwargs["in_channels"], 11) if batched else (kwargs["in_channels"], 11)
    check_op([shape], theirs, ours)
    tx = torch.randn(2, kwargs["in_channels"], 11)
    (theirs(tx) * 1.5).sum().backward()
    (ours(ag.tensor(tx.numpy())) * 1.5).sum().backward()
    np.testing.assert_allclose(ours.weight.grad.numpy(), theirs.weight.grad.numpy(), rtol=1e-4, atol=1e-5)


def test_conv1d_init_bound():
    values = nn.Conv1d(4, 8, 3).weight.numpy()
    assert np.abs(values).max() <= 1 / np.sqrt(12) and values.std() > 0.1


@pytest.mark.parametrize("kwargs", [dict(kernel_size=2), dict(kernel_size=3, stride=2, padding=1),
                                    dict(kernel_size=3, stride=1, dilation=2, ceil_mode=True)])
def test_max_pool1d(kwargs):
    check_op([(2, 3, 9)], torch.nn.MaxPool1d(**kwargs), nn.MaxPool1d(**kwargs))
    t_out, t_idx = torch.nn.functional.max_pool1d(torch.arange(18.0).reshape(2, 1, 9).sin(), return_indices=True,
                                                  **kwargs)
    a_out, a_idx = nn.functional.max_pool1d(ag.tensor(np.sin(np.arange(18.0, dtype=np.float32)).reshape(2, 1, 9)),
                                            return_indices=True, **kwargs)
    np.testing.assert_array_equal(a_idx.numpy(), t_idx.numpy())


@pytest.mark.parametrize("kwargs", [dict(kernel_size=2), dict(kernel_size=3, stride=2, padding=1),
                                    dict(kernel_size=3, padding=1, count_include_pad=False, ceil_mode=True)])
def test_avg_pool1d(kwargs):
    check_op([(2, 3, 10)], torch.nn.AvgPool1d(**kwargs), nn.AvgPool1d(**kwargs))
    check_op([(3, 7)], torch.nn.AvgPool1d(**kwargs), nn.AvgPool1d(**kwargs))


@pytest.mark.parametrize("shape", [(6, 4), (5, 4, 7)])
def test_batch_norm1d_training_and_eval(shape):
    torch.manual_seed(1)
    theirs, ours = torch.nn.BatchNorm1d(4, momentum=0.3), nn.BatchNorm1d(4, momentum=0.3)
    with torch.no_grad():
        theirs.weight.uniform_(0.5, 1.5)
        theirs.bias.uniform_(-0.5, 0.5)
    ours.load_state_dict(theirs.state_dict())
    for _ in range(2):
        check_op([shape], theirs, ours, seed=len(shape))
    for name in ("running_mean", "running_var", "num_batches_tracked"):
        np.testing.assert_allclose(getattr(ours, name).numpy(), getattr(theirs, name).numpy(), rtol=1e-5, atol=1e-6)
    theirs.eval()
    ours.eval()
    check_op([shape], theirs, ours, seed=3)
    with pytest.raises(ValueError, match="2D or 3D"):
        ours(ag.zeros(2, 4, 3, 3))
