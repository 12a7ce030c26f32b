"""Padding modes, pixel shuffles and instance norms against torch on the CPU: values and
gradients on random odd-sized inputs, torch's running statistics, clear errors."""

import pathlib
import sys

import numpy as np
import pytest
import torch

import anygpu as ag

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[1]))
from tensor.helper import check_pair as check  # noqa: E402  (the one torch-oracle helper)
from tensor.helper import torch_pair as both  # noqa: E402


@pytest.mark.parametrize("mode", ["reflect", "replicate", "circular"])
@pytest.mark.parametrize("shape, pad", [((2, 3, 7), (3, 1)), ((2, 3, 5, 6), (2, 1, 3, 4)), ((3, 5, 4), (0, 2, 1, 0)),
                                        ((1, 2, 3, 4, 5), (1, 1, 2, 0, 1, 2))])
def test_pad_modes(rng, mode, shape, pad):
    if mode == "circular" and len(shape) - len(pad) // 2 < 2:
        pytest.skip("torch's circular padding wants the batch and channel dims")
    tx, ax = both(rng, *shape)
    check(rng, torch.nn.functional.pad(tx, pad, mode=mode), ag.nn.functional.pad(ax, pad, mode=mode), [tx], [ax])


def test_pad_mode_errors(rng):
    x = ag.tensor(rng.standard_normal((1, 2, 3)).astype(np.float32))
    with pytest.raises(ValueError, match="smaller than its size"):
        ag.nn.functional.pad(x, (3, 0), mode="reflect")
    with pytest.raises(ValueError, match="mode must be"):
        ag.nn.functional.pad(x, (1, 1), mode="mirror")
    with pytest.raises(ValueError, match="no negative"):
        ag.nn.functional.pad(x, (-1, 1), mode="replicate")


@pytest.mark.parametrize("shape, r", [((2, 12, 3, 5), 2), ((18, 2, 3), 3), ((2, 1, 8, 2, 2), 2)])
def test_pixel_shuffle_and_unshuffle(rng, shape, r):
    tx, ax = both(rng, *shape)
    check(rng, torch.nn.functional.pixel_shuffle(tx, r), ag.nn.PixelShuffle(r)(ax), [tx], [ax])
    big = (*shape[:-3], shape[-3] // (r * r), shape[-2] * r, shape[-1] * r)
    ty, ay = both(rng, *big)
    check(rng, torch.nn.functional.pixel_unshuffle(ty, r), ag.nn.PixelUnshuffle(r)(ay), [ty], [ay])
    with pytest.raises(ValueError, match="divisible"):
        ag.nn.functional.pixel_shuffle(ag.ones(2, 5, 3, 3), 2)


@pytest.mark.parametrize("affine", [False, True])
@pytest.mark.parametrize("cls, shape", [("InstanceNorm2d", (3, 4, 5, 7)), ("InstanceNorm1d", (2, 3, 9)),
                                        ("InstanceNorm2d", (4, 3, 5))])
def test_instance_norm_forward_and_gradients(rng, affine, cls, shape):
    channels = shape[1] if len(shape) == (4 if cls == "InstanceNorm2d" else 3) else shape[0]
    t_norm, a_norm = getattr(torch.nn, cls)(channels, affine=affine), getattr(ag.nn, cls)(channels, affine=affine)
    if affine:
        weight, bias = (rng.standard_normal(channels).astype(np.float32) for _ in range(2))
        with torch.no_grad():
            t_norm.weight.copy_(torch.tensor(weight))
            t_norm.bias.copy_(torch.tensor(bias))
        a_norm.weight = ag.nn.Parameter(ag.tensor(weight))
        a_norm.bias = ag.nn.Parameter(ag.tensor(bias))
    tx, ax = both(rng, *shape)
    params = ([t_norm.weight, t_norm.bias], [a_norm.weight, a_norm.bias]) if affine else ([], [])
    check(rng, t_norm(tx), a_norm(ax), [tx, *params[0]], [ax, *params[1]], rtol=1e-4)


def test_instance_norm_running_statistics_as_torch(rng):
    t_norm = torch.nn.InstanceNorm2d(3, momentum=0.3, affine=True, track_running_stats=True)
    a_norm = ag.nn.InstanceNorm2d(3, momentum=0.3, affine=True, track_running_stats=True)
    assert set(a_norm.state_dict()) == set(t_norm.state_dict())
    for _ in range(2):
        data = (rng.standard_normal((4, 3, 5, 6)) * 3 + 1).astype(np.float32)
        t_norm(torch.tensor(data))
        a_norm(ag.tensor(data))
    np.testing.assert_allclose(a_norm.running_mean.numpy(), t_norm.running_mean.numpy(), rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(a_norm.running_var.numpy(), t_norm.running_var.numpy(), rtol=1e-5, atol=1e-6)
    t_norm.eval()
    a_norm.eval()
    data = rng.standard_normal((2, 3, 4, 4)).astype(np.float32)
    np.testing.assert_allclose(a_norm(ag.tensor(data)).numpy(), t_norm(torch.tensor(data)).detach().numpy(),
                               rtol=1e-5, atol=1e-5)
    with pytest.raises(ValueError, match="expected 3D"):
        a_norm(ag.ones(3, 4))


@pytest.mark.parametrize("name, args", [("ZeroPad2d", ((1, 2, 0, 3),)), ("ConstantPad2d", (2, 3.5)),
                                        ("ConstantPad1d", ((3, 1), -1.0)), ("ReflectionPad2d", (2,)),
                                        ("ReflectionPad1d", ((1, 3),)), ("ReplicationPad2d", ((0, 1, 2, 3),)),
                                        ("ReplicationPad1d", (2,)), ("CircularPad2d", (1,)), ("CircularPad1d", ((2, 1),)),
                                        ("ZeroPad1d", (2,))])
def test_padding_modules(rng, name, args):
    shape = (2, 3, 5) if name.endswith("1d") else (2, 3, 5, 6)
    tx, ax = both(rng, *shape)
    check(rng, getattr(torch.nn, name)(*args)(tx), getattr(ag.nn, name)(*args)(ax), [tx], [ax])


@pytest.mark.parametrize("name, shape, size", [
    ("AdaptiveAvgPool2d", (2, 3, 7, 10), (3, 4)), ("AdaptiveAvgPool2d", (3, 9, 5), (4, None)),
    ("AdaptiveAvgPool2d", (2, 3, 6, 4), (3, 2)), ("AdaptiveAvgPool2d", (1, 2, 5, 5), 1),
    ("AdaptiveAvgPool1d", (2, 3, 11), 4), ("AdaptiveAvgPool1d", (3, 7), 7),
    ("AdaptiveMaxPool2d", (2, 3, 7, 10), (3, 4)), ("AdaptiveMaxPool2d", (3, 5, 6), 2),
    ("AdaptiveMaxPool2d", (1, 2, 4, 9), (None, 5)), ("AdaptiveMaxPool1d", (2, 3, 11), 4),
    ("AdaptiveMaxPool1d", (4, 6), 1)])
def test_adaptive_pools_with_uneven_windows(rng, name, shape, size):
    tx, ax = both(rng, *shape)
    check(rng, getattr(torch.nn, name)(size)(tx), getattr(ag.nn, name)(size)(ax), [tx], [ax])


@pytest.mark.parametrize("name, shape, size", [
    ("adaptive_max_pool2d", (2, 3, 11, 7), (4, 3)), ("adaptive_max_pool2d", (3, 9, 13), (5, None)),
    ("adaptive_max_pool2d", (1, 2, 6, 6), 3), ("adaptive_max_pool1d", (2, 3, 17), 5), ("adaptive_max_pool1d", (4, 9), 9)])
def test_adaptive_max_pool_indices_match_torch_also_on_ties(rng, name, shape, size):
    """return_indices: torch's int64 positions (h*W + w in 2-D), the first maximum in
    row-major order where values tie (inputs rounded to halves, so ties are common);
    the values' gradient still flows."""
    x = np.round(rng.standard_normal(shape) * 2).astype(np.float32) / 2
    t_values, t_index = getattr(torch.nn.functional, name)(torch.tensor(x), size, return_indices=True)
    a_values, a_index = getattr(ag.nn.functional, name)(ag.tensor(x), size, return_indices=True)
    assert a_index.dtype == ag.int64 and a_index.shape == tuple(t_index.shape)
    np.testing.assert_array_equal(a_index.numpy(), t_index.numpy())
    np.testing.assert_array_equal(a_values.numpy(), t_values.numpy())
    module = getattr(ag.nn, "AdaptiveMaxPool2d" if name.endswith("2d") else "AdaptiveMaxPool1d")(size, return_indices=True)
    np.testing.assert_array_equal(module(ag.tensor(x))[1].numpy(), t_index.numpy())
    weights = rng.standard_normal(tuple(t_values.shape)).astype(np.float32)
    for indices in (True, False):  # a tie's gradient goes to its first maximum, as torch's
        tx = torch.tensor(x, requires_grad=True)
        ax = ag.tensor(x, requires_grad=True)
        t_out = getattr(torch.nn.functional, name)(tx, size, return_indices=indices)
        a_out = getattr(ag.nn.functional, name)(ax, size, return_indices=indices)
        ((t_out[0] if indices else t_out) * torch.tensor(weights)).sum().backward()
        ((a_out[0] if indices else a_out) * ag.tensor(weights)).sum().backward()
        np.testing.assert_allclose(ax.grad.numpy(), tx.grad.numpy(), rtol=1e-6, atol=1e-6)


def test_adaptive_pool_errors(rng):
    x = ag.ones(2, 3, 4, 4)
    with pytest.raises(ValueError, match="positive"):
        ag.nn.functional.adaptive_max_pool2d(x, 0)
    with pytest.raises(ValueError, match="2-tuple"):
        ag.nn.functional.adaptive_avg_pool2d(x, (1, 2, 3))
