"""torch.fmax / fmin / heaviside / diag_embed, F.bilinear + nn.Bilinear and
F.conv_transpose1d + nn.ConvTranspose1d against torch on the CPU (values, gradients, NaN)."""

import pathlib
import sys

import numpy as np
import pytest
import torch

import anygpu as ag

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[1]))
from tensor.helper import check_pair as check  # noqa: E402  (the one torch-oracle helper)
from tensor.helper import torch_pair as both  # noqa: E402


@pytest.mark.parametrize("name", ["fmax", "fmin", "heaviside"])
def test_nan_aware_binary_functions(rng, name):
    a = rng.standard_normal((4, 6)).astype(np.float32)
    b = rng.standard_normal((4, 6)).astype(np.float32)
    a[0, :3] = np.nan
    b[0, 1:4] = np.nan
    a[1, :2] = 0.0
    b[2, 5] = np.inf
    ours = getattr(ag, name)(ag.tensor(a), ag.tensor(b)).numpy()
    theirs = getattr(torch, name)(torch.tensor(a), torch.tensor(b)).numpy()
    np.testing.assert_array_equal(ours, theirs)


def test_fmax_gradient(rng):
    ta, aa = both(rng, 3, 7)
    tb, ab = both(rng, 3, 7)
    check(rng, torch.fmax(ta, tb), ag.fmax(aa, ab), [ta, tb], [aa, ab])


@pytest.mark.parametrize("shape, offset, dim1, dim2", [((2, 3, 4), 0, -2, -1), ((5,), 2, 0, 1), ((2, 3), -1, 0, 2),
                                                      ((2, 3, 4), 1, 1, 0)])
def test_diag_embed(rng, shape, offset, dim1, dim2):
    tx, ax = both(rng, *shape)
    check(rng, torch.diag_embed(tx, offset, dim1, dim2), ag.diag_embed(ax, offset, dim1, dim2), [tx], [ax])


@pytest.mark.parametrize("lead", [(7,), (2, 5), ()])
def test_bilinear(rng, lead):
    t_layer = torch.nn.Bilinear(4, 3, 5)
    a_layer = ag.nn.Bilinear(4, 3, 5)
    a_layer.weight = ag.nn.Parameter(ag.tensor(t_layer.weight.detach().numpy()))
    a_layer.bias = ag.nn.Parameter(ag.tensor(t_layer.bias.detach().numpy()))
    t1, a1 = both(rng, *lead, 4)
    t2, a2 = both(rng, *lead, 3)
    check(rng, t_layer(t1, t2), a_layer(a1, a2), [t1, t2, t_layer.weight, t_layer.bias],
          [a1, a2, a_layer.weight, a_layer.bias], rtol=1e-4)
    with pytest.raises(ValueError, match="bilinear"):
        a_layer(a1, ag.ones(*lead, 4))


@pytest.mark.parametrize("kwargs", [dict(stride=1), dict(stride=2, padding=1, output_padding=1),
                                    dict(stride=3, padding=2, groups=2, dilation=2)])
def test_conv_transpose1d(rng, kwargs):
    t_layer = torch.nn.ConvTranspose1d(4, 6, 3, **kwargs)
    a_layer = ag.nn.ConvTranspose1d(4, 6, 3, **kwargs)
    assert tuple(a_layer.weight.shape) == tuple(t_layer.weight.shape)
    a_layer.weight = ag.nn.Parameter(ag.tensor(t_layer.weight.detach().numpy()))
    a_layer.bias = ag.nn.Parameter(ag.tensor(t_layer.bias.detach().numpy()))
    tx, ax = both(rng, 2, 4, 9)
    check(rng, t_layer(tx), a_layer(ax), [tx, t_layer.weight, t_layer.bias], [ax, a_layer.weight, a_layer.bias],
          rtol=1e-4)


def _gumbel_noise(seed, shape):
    """The noise gumbel_softmax draws after manual_seed(seed), computed here in NumPy."""
    uniform = np.random.default_rng(seed).random(shape)
    return -np.log(-np.log(np.clip(uniform, np.finfo(np.float64).tiny, 1.0 - 2.0 ** -53))).astype(np.float32)


@pytest.mark.parametrize("hard", [False, True])
def test_gumbel_softmax_against_torch_with_the_same_noise(rng, hard):
    logits = rng.standard_normal((6, 5)).astype(np.float32)
    tau = 0.7
    ag.manual_seed(9)
    a_logits = ag.tensor(logits, requires_grad=True)
    a_out = ag.nn.functional.gumbel_softmax(a_logits, tau=tau, hard=hard)
    t_logits = torch.tensor(logits, requires_grad=True)
    y_soft = torch.softmax((t_logits + torch.tensor(_gumbel_noise(9, logits.shape))) / tau, -1)
    if hard:
        y_hard = torch.zeros_like(y_soft).scatter_(-1, y_soft.argmax(-1, keepdim=True), 1.0)
        t_out = y_hard - y_soft.detach() + y_soft
        assert set(np.unique(a_out.numpy())) <= {0.0, 1.0} and (a_out.numpy().sum(1) == 1).all()
    else:
        t_out = y_soft
    check(rng, t_out, a_out, [t_logits], [a_logits])


def test_gumbel_softmax_samples_follow_the_softmax(rng):
    probs = np.array([0.1, 0.2, 0.3, 0.4], np.float32)
    ag.manual_seed(4)
    samples = ag.nn.functional.gumbel_softmax(ag.tensor(np.log(np.tile(probs, (8000, 1)))), hard=True).numpy()
    np.testing.assert_allclose(samples.mean(0), probs, atol=0.02)
    with pytest.raises(ValueError, match="tau"):
        ag.nn.functional.gumbel_softmax(ag.ones(2, 3), tau=0)


@pytest.mark.parametrize("mode", ["sum", "mean", "max"])
@pytest.mark.parametrize("form", ["offsets", "2d", "last offset", "padding"])
def test_embedding_bag_against_torch(rng, mode, form):
    weight = rng.standard_normal((11, 5)).astype(np.float32)
    if form == "2d":
        indices, offsets = rng.integers(0, 11, (4, 3)), None
    else:
        indices = np.array([1, 2, 4, 5, 4, 3, 2, 9, 0, 7, 7], np.int64)
        offsets = np.array([0, 4, 4, 7, 11] if form == "last offset" else [0, 4, 4, 7], np.int64)
    kwargs = dict(mode=mode, include_last_offset=form == "last offset", padding_idx=4 if form == "padding" else None)
    t_bag = torch.nn.EmbeddingBag(11, 5, _weight=torch.tensor(weight), **kwargs)
    a_bag = ag.nn.EmbeddingBag(11, 5, _weight=ag.tensor(weight), **kwargs)

    def args(lib):
        return [lib.tensor(indices.astype(np.int32) if lib is ag else indices)] + (
            [] if offsets is None else [lib.tensor(offsets.astype(np.int32) if lib is ag else offsets)])
    check(rng, t_bag(*args(torch)), a_bag(*args(ag)), [t_bag.weight], [a_bag.weight])


def test_embedding_bag_per_sample_weights(rng):
    weight = rng.standard_normal((6, 3)).astype(np.float32)
    indices = np.array([0, 5, 5, 2, 3], np.int64)
    offsets = np.array([0, 2], np.int64)
    psw = rng.standard_normal(5).astype(np.float32)
    tw, aw = torch.tensor(weight, requires_grad=True), ag.tensor(weight, requires_grad=True)
    tp, ap = torch.tensor(psw, requires_grad=True), ag.tensor(psw, requires_grad=True)
    t_out = torch.nn.functional.embedding_bag(torch.tensor(indices), tw, torch.tensor(offsets), mode="sum",
                                              per_sample_weights=tp)
    a_out = ag.nn.functional.embedding_bag(ag.tensor(indices.astype(np.int32)), aw,
                                           ag.tensor(offsets.astype(np.int32)), mode="sum", per_sample_weights=ap)
    check(rng, t_out, a_out, [tw, tp], [aw, ap])
    with pytest.raises(ValueError, match="per_sample_weights needs mode='sum'"):
        ag.nn.functional.embedding_bag(ag.tensor(indices.astype(np.int32)), aw, ag.tensor(offsets.astype(np.int32)),
                                       mode="mean", per_sample_weights=ap)
    with pytest.raises(ValueError, match="offsets"):
        ag.nn.functional.embedding_bag(ag.tensor(indices.astype(np.int32)), aw)
