"""More activations, distances and losses against torch (values and gradients of every
float input, odd shapes, each reduction), through the one torch-oracle helper."""

import pathlib
import sys

import numpy as np
import pytest
import torch
import torch.nn.functional as TF

import anygpu as ag
from anygpu import nn
from anygpu.nn import functional as F

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[1]))
from tensor.helper import check_op  # noqa: E402  (the one torch-oracle helper)

REDUCTIONS = ["mean", "sum", "none"]
rng = np.random.default_rng(1)


def _signs(shape):
    return np.where(rng.random(shape) < 0.5, -1.0, 1.0).astype(np.float32)


ACTIVATIONS = [("SELU", {}), ("CELU", dict(alpha=0.6)), ("GLU", dict(dim=1)), ("GLU", {}), ("Hardsigmoid", {}),
               ("Hardswish", {}), ("Softsign", {}), ("Tanhshrink", {}), ("Softmin", dict(dim=-1)),
               ("Threshold", dict(threshold=0.3, value=-2.0))]


@pytest.mark.parametrize("name,kwargs", ACTIVATIONS, ids=[f"{n}-{k}" for n, k in ACTIVATIONS])
def test_activations(name, kwargs):
    check_op([(3, 4, 6)], getattr(torch.nn, name)(**kwargs), getattr(nn, name)(**kwargs), low=-5.0, high=5.0)
    assert repr(getattr(nn, name)(**kwargs)) == repr(getattr(torch.nn, name)(**kwargs))


@pytest.mark.parametrize("num_parameters,shape", [(1, (4, 5)), (3, (2, 3, 5)), (3, (2, 3, 4, 2)), (1, (7,))])
def test_prelu(num_parameters, shape):
    theirs = torch.nn.PReLU(num_parameters, init=0.1)
    with torch.no_grad():
        theirs.weight.uniform_(-0.5, 0.5)
    ours = nn.PReLU(num_parameters)
    ours.load_state_dict(theirs.state_dict())
    check_op([shape], theirs, ours)
    x = rng.standard_normal(shape).astype(np.float32)
    theirs(torch.tensor(x)).sum().backward()
    ours(ag.tensor(x)).sum().backward()
    np.testing.assert_allclose(ours.weight.grad.numpy(), theirs.weight.grad.numpy(), rtol=1e-4, atol=1e-5)
    assert nn.PReLU().weight.numpy().tolist() == [0.25]


@pytest.mark.parametrize("dim,shapes", [(1, [(4, 5), (4, 5)]), (-1, [(2, 3, 6), (1, 3, 6)]), (0, [(5,), (5,)])])
def test_cosine_similarity(dim, shapes):
    check_op(shapes, lambda a, b: TF.cosine_similarity(a, b, dim=dim), lambda a, b: F.cosine_similarity(a, b, dim=dim))
    check_op(shapes, torch.nn.CosineSimilarity(dim), nn.CosineSimilarity(dim))


@pytest.mark.parametrize("p", [2.0, 1.0, 3.0, float("inf")])
@pytest.mark.parametrize("keepdim", [False, True])
def test_pairwise_distance(p, keepdim):
    check_op([(4, 6), (4, 6)], torch.nn.PairwiseDistance(p, keepdim=keepdim), nn.PairwiseDistance(p, keepdim=keepdim))


@pytest.mark.parametrize("reduction", REDUCTIONS)
def test_margin_ranking_and_soft_margin(reduction):
    y = _signs((7,))
    check_op([(7,), (7,), y], lambda a, b, t: TF.margin_ranking_loss(a, b, t.detach(), 0.3, reduction=reduction),
             lambda a, b, t: F.margin_ranking_loss(a, b, t.detach(), 0.3, reduction=reduction))
    check_op([(3, 5), _signs((3, 5))], lambda a, t: TF.soft_margin_loss(a, t.detach(), reduction=reduction),
             lambda a, t: nn.SoftMarginLoss(reduction=reduction)(a, t.detach()))


@pytest.mark.parametrize("reduction", REDUCTIONS)
def test_hinge_and_cosine_embedding(reduction):
    check_op([(4, 3), _signs((4, 3))], torch.nn.HingeEmbeddingLoss(margin=0.5, reduction=reduction),
             lambda a, t: nn.HingeEmbeddingLoss(margin=0.5, reduction=reduction)(a, t), grad=True)
    y = _signs((6,))
    check_op([(6, 5), (6, 5), y],
             lambda a, b, t: torch.nn.CosineEmbeddingLoss(0.2, reduction=reduction)(a, b, t.detach()),
             lambda a, b, t: nn.CosineEmbeddingLoss(0.2, reduction=reduction)(a, b, t.detach()))


@pytest.mark.parametrize("reduction", REDUCTIONS)
@pytest.mark.parametrize("options", [dict(), dict(p=1.0, margin=0.5, swap=True)])
def test_triplet_margin_loss(reduction, options):
    check_op([(5, 4), (5, 4), (5, 4)], torch.nn.TripletMarginLoss(reduction=reduction, **options),
             nn.TripletMarginLoss(reduction=reduction, **options))


@pytest.mark.parametrize("reduction", REDUCTIONS)
@pytest.mark.parametrize("log_input,full", [(True, False), (False, True), (True, True)])
def test_poisson_nll_loss(reduction, log_input, full):
    """Counts as targets, without gradient (torch's target gradient is NaN at 0 with full=True)."""
    target = rng.integers(0, 5, size=(4, 3)).astype(np.float32)
    low = -1.0 if log_input else 0.1
    check_op([rng.uniform(low, 2.0, size=(4, 3)).astype(np.float32), target],
             lambda x, t: TF.poisson_nll_loss(x, t.detach(), log_input, full, reduction=reduction),
             lambda x, t: nn.PoissonNLLLoss(log_input, full, reduction=reduction)(x, t.detach()))


@pytest.mark.parametrize("reduction", REDUCTIONS)
@pytest.mark.parametrize("var_shape", [(4, 3), (4,), (4, 1)])
def test_gaussian_nll_loss(reduction, var_shape):
    var = rng.uniform(0.2, 2.0, size=var_shape).astype(np.float32)
    for full in (False, True):
        check_op([(4, 3), (4, 3), var], lambda x, t, v: TF.gaussian_nll_loss(x, t, v, full=full, reduction=reduction),
                 lambda x, t, v: nn.GaussianNLLLoss(full=full, reduction=reduction)(x, t, v))


@pytest.mark.parametrize("reduction", REDUCTIONS)
def test_multilabel_soft_margin_loss(reduction):
    target = (rng.random((5, 4)) < 0.5).astype(np.float32)
    weight = rng.uniform(0.5, 1.5, size=(4,)).astype(np.float32)
    check_op([(5, 4), target], lambda x, t: TF.multilabel_soft_margin_loss(x, t, torch.tensor(weight),
                                                                           reduction=reduction),
             lambda x, t: nn.MultiLabelSoftMarginLoss(ag.tensor(weight), reduction=reduction)(x, t))
