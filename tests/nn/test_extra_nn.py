"""nn/extra_functional.py and nn/extra_modules.py against torch: forward values, gradients
of every float input (through the one torch-oracle helper), state dict keys, reprs, eval
against train modes and bad inputs."""

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


def _pair(values, requires_grad=True):
    """The same float32 array as a torch and an anygpu tensor."""
    values = np.asarray(values, np.float32)
    return torch.tensor(values, requires_grad=requires_grad), ag.tensor(values, requires_grad=requires_grad)


# ===================================================================== 1. RMSNorm

@pytest.mark.parametrize("shape,normalized", [((3, 7), (7,)), ((2, 3, 5), (3, 5)), ((4, 1, 9), 9)])
@pytest.mark.parametrize("eps", [None, 1e-3])
@pytest.mark.parametrize("with_weight", [True, False])
def test_rms_norm_matches_torch(shape, normalized, eps, with_weight):
    norm = (normalized,) if isinstance(normalized, int) else normalized
    inputs = [shape] + ([norm] if with_weight else [])
    check_op(inputs, lambda x, *w: TF.rms_norm(x, norm, w[0] if w else None, eps),
             lambda x, *w: F.rms_norm(x, normalized, w[0] if w else None, eps), low=-3.0, high=3.0)


def test_rms_norm_eps_none_counts_on_tiny_inputs():
    # With inputs near 0 the default eps (float32's) dominates; a wrong default shows.
    x = np.full((2, 6), 1e-4, np.float32)
    expected = TF.rms_norm(torch.tensor(x), (6,)).numpy()
    np.testing.assert_allclose(F.rms_norm(ag.tensor(x), (6,)).numpy(), expected, rtol=1e-5)


def test_rms_norm_float16_computes_in_float32():
    rng = np.random.default_rng(3)
    x = (rng.standard_normal((5, 33)) * 40).astype(np.float16)
    w = rng.uniform(0.5, 1.5, 33).astype(np.float16)
    expected = TF.rms_norm(torch.tensor(x), (33,), torch.tensor(w))
    out = F.rms_norm(ag.tensor(x), (33,), ag.tensor(w))
    assert out.dtype is ag.float16
    np.testing.assert_allclose(out.numpy().astype(np.float32), expected.float().numpy(), rtol=1e-3, atol=1e-3)
    # rounded once, after the weight: equal to torch's f16 result but for the odd last-bit tie
    assert np.mean(out.numpy() == expected.numpy()) > 0.97
    # eps=None is float32's epsilon for float16 input (float16's would swamp these squares)
    tiny = np.full((2, 6), 1e-3, np.float16)
    np.testing.assert_allclose(F.rms_norm(ag.tensor(tiny), (6,)).numpy().astype(np.float32),
                               TF.rms_norm(torch.tensor(tiny), (6,)).float().numpy(), rtol=1e-3)
    # the result keeps the input's dtype with a float32 weight
    mixed = F.rms_norm(ag.tensor(x), (33,), ag.tensor(w.astype(np.float32)))
    assert mixed.dtype is ag.float16
    np.testing.assert_allclose(mixed.numpy().astype(np.float32), expected.float().numpy(), rtol=1e-3, atol=1e-3)


def test_rms_norm_module_state_dict_repr_and_errors():
    theirs, ours = torch.nn.RMSNorm((3, 4)), nn.RMSNorm((3, 4))
    assert list(ours.state_dict()) == list(theirs.state_dict()) == ["weight"]
    assert repr(ours) == repr(theirs)
    assert repr(nn.RMSNorm(5, eps=1e-6, elementwise_affine=False)) == repr(
        torch.nn.RMSNorm(5, eps=1e-6, elementwise_affine=False))
    assert list(nn.RMSNorm(5, elementwise_affine=False).state_dict()) == []
    check_op([(2, 3, 4)], theirs, ours)
    with pytest.raises(ValueError):
        ours(ag.zeros(2, 4, 3))


# ===================================================================== 2. in-place activations

INPLACE = [("relu_", {}), ("elu_", dict(alpha=0.7)), ("leaky_relu_", dict(negative_slope=0.2)),
           ("hardtanh_", dict(min_val=-0.5, max_val=0.8)), ("selu_", {}), ("celu_", dict(alpha=1.3)),
           ("threshold_", dict(threshold=0.2, value=-3.0))]


@pytest.mark.parametrize("name,kwargs", INPLACE, ids=[n for n, _ in INPLACE])
def test_inplace_activations_write_the_input(name, kwargs):
    values = np.random.default_rng(5).uniform(-3, 3, (3, 5, 7)).astype(np.float32)
    t_leaf, a_leaf = _pair(values)
    t_mid, a_mid = t_leaf * 1.5, a_leaf * 1.5
    t_out = getattr(TF, name)(t_mid, **kwargs)
    a_out = getattr(F, name)(a_mid, **kwargs)
    assert a_out is a_mid
    np.testing.assert_allclose(a_mid.numpy(), t_mid.detach().numpy(), rtol=1e-5, atol=1e-6)
    weights = np.random.default_rng(6).uniform(0.5, 1.5, values.shape).astype(np.float32)
    (t_out * torch.tensor(weights)).sum().backward()
    (a_out * ag.tensor(weights)).sum().backward()
    np.testing.assert_allclose(a_leaf.grad.numpy(), t_leaf.grad.numpy(), rtol=1e-5, atol=1e-6)
    # no graph: the buffer itself changes, and views of it see the write
    plain = ag.tensor(values)
    alias = plain.detach()
    getattr(F, name)(plain, **kwargs)
    np.testing.assert_allclose(alias.numpy(), getattr(TF, name)(torch.tensor(values), **kwargs).numpy(),
                               rtol=1e-5, atol=1e-6)


def test_inplace_activation_on_leaf_that_requires_grad_raises():
    with pytest.raises(RuntimeError):
        F.relu_(ag.ones(3, requires_grad=True))


# ===================================================================== 3. shrink, softmax2d, shuffle, upsample

@pytest.mark.parametrize("lambd", [0.5, 1.2, 0.0])
def test_shrinks(lambd):
    check_op([(4, 9)], lambda x: TF.softshrink(x, lambd), lambda x: F.softshrink(x, lambd))
    check_op([(4, 9)], lambda x: TF.hardshrink(x, lambd), lambda x: F.hardshrink(x, lambd))
    for name in ("Softshrink", "Hardshrink"):
        check_op([(2, 3, 5)], getattr(torch.nn, name)(lambd), getattr(nn, name)(lambd))
        assert repr(getattr(nn, name)(lambd)) == repr(getattr(torch.nn, name)(lambd))


def test_softshrink_keeps_nan_and_rejects_negative_lambda():
    values = np.array([np.nan, 0.1, -2.0, np.inf], np.float32)
    np.testing.assert_array_equal(F.softshrink(ag.tensor(values)).numpy(), TF.softshrink(torch.tensor(values)).numpy())
    with pytest.raises(ValueError):
        F.softshrink(ag.ones(3), -0.1)


@pytest.mark.parametrize("shape", [(2, 5, 3, 4), (5, 3, 4)])
def test_softmax2d(shape):
    check_op([shape], torch.nn.Softmax2d(), nn.Softmax2d())
    with pytest.raises(ValueError):
        nn.Softmax2d()(ag.zeros(3, 4))


@pytest.mark.parametrize("shape,groups", [((2, 6, 3, 5), 3), ((3, 8, 7), 2), ((1, 6, 2, 2, 3), 6)])
def test_channel_shuffle(shape, groups):
    check_op([shape], lambda x: TF.channel_shuffle(x, groups), lambda x: F.channel_shuffle(x, groups))
    check_op([shape], torch.nn.ChannelShuffle(groups), nn.ChannelShuffle(groups))
    assert repr(nn.ChannelShuffle(groups)) == repr(torch.nn.ChannelShuffle(groups))
    with pytest.raises(ValueError):
        F.channel_shuffle(ag.zeros(2, 5, 3), 2)


@pytest.mark.parametrize("kwargs", [dict(scale_factor=2), dict(size=(7, 5)), dict(size=1), dict(scale_factor=3)])
def test_upsampling_modules(kwargs):
    check_op([(2, 3, 4, 5)], torch.nn.UpsamplingNearest2d(**kwargs), nn.UpsamplingNearest2d(**kwargs))
    check_op([(2, 3, 4, 5)], torch.nn.UpsamplingBilinear2d(**kwargs), nn.UpsamplingBilinear2d(**kwargs))
    check_op([(2, 3, 4, 5)], lambda x: TF.interpolate(x, mode="bilinear", align_corners=True, **kwargs),
             lambda x: F.upsample_bilinear(x, **kwargs))
    for name in ("UpsamplingNearest2d", "UpsamplingBilinear2d"):
        assert repr(getattr(nn, name)(**kwargs)) == repr(getattr(torch.nn, name)(**kwargs))


def test_float16_inputs_stay_float16():
    values = np.random.default_rng(12).uniform(0.1, 2.0, (2, 4, 6, 5)).astype(np.float16)
    cases = [(F.softshrink, TF.softshrink), (lambda t: F.local_response_norm(t, 3), lambda t: TF.local_response_norm(t, 3)),
             (lambda t: F.lp_pool2d(t, 2, 2), lambda t: TF.lp_pool2d(t, 2, 2)),
             (lambda t: F.channel_shuffle(t, 2), lambda t: TF.channel_shuffle(t, 2)),
             (lambda t: F.upsample_bilinear(t, scale_factor=2),
              lambda t: TF.interpolate(t, scale_factor=2, mode="bilinear", align_corners=True))]
    for ours, theirs in cases:
        out = ours(ag.tensor(values))
        assert out.dtype is ag.float16
        np.testing.assert_allclose(out.numpy().astype(np.float32), theirs(torch.tensor(values).float()).numpy(),
                                   rtol=3e-3, atol=3e-3)


# ===================================================================== 4. LRN, alpha dropout, pdist, LP pooling

@pytest.mark.parametrize("shape", [(2, 7, 5), (2, 6, 3, 4), (1, 5, 2, 3, 2)])
@pytest.mark.parametrize("size", [1, 2, 3, 4])
def test_local_response_norm(shape, size):
    check_op([shape], lambda x: TF.local_response_norm(x, size, 1e-2, 0.6, 1.5),
             lambda x: F.local_response_norm(x, size, 1e-2, 0.6, 1.5), low=-3.0, high=3.0)
    module = nn.LocalResponseNorm(size, 0.3)
    check_op([shape], torch.nn.LocalResponseNorm(size, 0.3), module, low=-3.0, high=3.0)
    assert repr(module) == repr(torch.nn.LocalResponseNorm(size, 0.3))


def test_local_response_norm_rejects_2d():
    with pytest.raises(ValueError):
        F.local_response_norm(ag.zeros(3, 4), 2)


@pytest.mark.parametrize("name", ["AlphaDropout", "FeatureAlphaDropout"])
def test_alpha_dropout_eval_is_identity_and_train_keeps_selu_statistics(name):
    ours, theirs = getattr(nn, name)(0.3), getattr(torch.nn, name)(0.3)
    assert repr(ours) == repr(theirs)
    ours.eval()
    x = ag.tensor(np.random.default_rng(2).standard_normal((4, 5, 3)).astype(np.float32))
    np.testing.assert_array_equal(ours(x).numpy(), x.numpy())
    ours.train()
    ag.manual_seed(0)
    values = np.random.default_rng(3).standard_normal((64, 64, 32)).astype(np.float32)
    out = ours(ag.tensor(values)).numpy()
    # dropped units take -alpha*scale*a + b, one value; mean 0 and variance 1 are kept
    assert abs(out.mean()) < 0.03 and abs(out.var() - 1.0) < 0.05
    a = 1.0 / np.sqrt((1.7580993408473766 ** 2 * 0.3 + 1) * 0.7)
    dropped_value = -1.7580993408473766 * a + 1.7580993408473766 * a * 0.3
    dropped = np.isclose(out, dropped_value, atol=1e-6)
    assert abs(dropped.mean() - 0.3) < 0.02
    kept = ~dropped
    np.testing.assert_allclose(out[kept], values[kept] * a + 1.7580993408473766 * a * 0.3, rtol=1e-5, atol=1e-5)
    if name == "FeatureAlphaDropout":  # whole channels at once
        assert np.all(dropped.all(-1) | (~dropped).all(-1))


def test_alpha_dropout_gradient_is_the_scale_and_edges():
    ag.manual_seed(1)
    x = ag.tensor(np.random.default_rng(4).standard_normal((50, 40)).astype(np.float32), requires_grad=True)
    out = F.alpha_dropout(x, 0.2, training=True)
    out.sum().backward()
    a = 1.0 / np.sqrt((1.7580993408473766 ** 2 * 0.2 + 1) * 0.8)
    grads = np.unique(np.round(x.grad.numpy(), 5))
    np.testing.assert_allclose(grads, [0.0, a], rtol=1e-4)
    np.testing.assert_array_equal(F.alpha_dropout(x, 1.0, True).numpy(), TF.alpha_dropout(torch.ones(50, 40), 1.0, True))
    assert F.alpha_dropout(x, 0.5) is x  # training defaults to False, as torch's
    with pytest.raises(ValueError):
        F.alpha_dropout(x, 1.5, True)
    with pytest.raises(ValueError):
        F.feature_alpha_dropout(ag.ones(5), 0.5, True)


@pytest.mark.parametrize("p", [2.0, 1.0, 3.0, 0.5, float("inf")])
@pytest.mark.parametrize("rows", [5, 2])
def test_pdist(p, rows):
    check_op([(rows, 7)], lambda x: TF.pdist(x, p), lambda x: F.pdist(x, p), grad_atol=1e-4)


def test_pdist_errors_and_single_row():
    assert F.pdist(ag.ones(1, 4)).shape == (0,)
    with pytest.raises(ValueError):
        F.pdist(ag.ones(2, 3, 4))


@pytest.mark.parametrize("norm_type", [2.0, 1.0, 3.0])
@pytest.mark.parametrize("kernel,stride,ceil", [(3, None, False), (2, 1, False), (3, 2, True)])
def test_lp_pool(norm_type, kernel, stride, ceil):
    check_op([(2, 3, 11)], lambda x: TF.lp_pool1d(x, norm_type, kernel, stride, ceil),
             lambda x: F.lp_pool1d(x, norm_type, kernel, stride, ceil), low=0.1, high=2.0)
    check_op([(2, 3, 9, 7)], lambda x: TF.lp_pool2d(x, norm_type, kernel, stride, ceil),
             lambda x: F.lp_pool2d(x, norm_type, kernel, stride, ceil), low=0.1, high=2.0)
    check_op([(3, 9, 7)], torch.nn.LPPool2d(norm_type, (kernel, 2), stride), nn.LPPool2d(norm_type, (kernel, 2), stride),
             low=0.1, high=2.0)
    check_op([(3, 10)], torch.nn.LPPool1d(norm_type, kernel, stride), nn.LPPool1d(norm_type, kernel, stride),
             low=0.1, high=2.0)
    assert repr(nn.LPPool2d(norm_type, kernel, stride)) == repr(torch.nn.LPPool2d(norm_type, kernel, stride))


# ===================================================================== 5. LazyLinear, pooling with indices, unpooling

def test_lazy_linear_infers_in_features():
    ours, theirs = nn.LazyLinear(4), torch.nn.LazyLinear(4)
    assert list(ours.state_dict()) == list(theirs.state_dict()) == ["weight", "bias"]
    x = np.random.default_rng(1).standard_normal((3, 6)).astype(np.float32)
    out = ours(ag.tensor(x))
    theirs(torch.tensor(x))
    assert type(ours) is nn.Linear and ours.in_features == 6 and ours.weight.shape == (4, 6)
    assert repr(ours) == repr(theirs)
    bound = 1 / np.sqrt(6)
    assert np.abs(ours.weight.numpy()).max() <= bound and np.abs(ours.bias.numpy()).max() <= bound
    np.testing.assert_allclose(out.numpy(), x @ ours.weight.numpy().T + ours.bias.numpy(), rtol=1e-5, atol=1e-5)
    out.sum().backward()
    np.testing.assert_allclose(ours.weight.grad.numpy(), np.tile(x.sum(0), (4, 1)), rtol=1e-5)


def test_lazy_linear_loads_a_state_dict_before_its_first_call():
    source = nn.Linear(5, 3)
    lazy = nn.LazyLinear(3)
    lazy.load_state_dict(source.state_dict())
    assert lazy.in_features == 5
    np.testing.assert_array_equal(lazy.weight.numpy(), source.weight.numpy())
    assert nn.LazyLinear(2, bias=False)(ag.ones(4, 3)).shape == (4, 2)


@pytest.mark.parametrize("dims", [1, 2])
def test_max_pool_with_indices_and_unpool(dims):
    shape = (2, 3, 11) if dims == 1 else (2, 3, 9, 7)
    values = np.random.default_rng(8).permutation(int(np.prod(shape))).reshape(shape).astype(np.float32)
    tx, ax = _pair(values)
    t_pool, a_pool = getattr(TF, f"max_pool{dims}d_with_indices"), getattr(F, f"max_pool{dims}d_with_indices")
    t_out, t_idx = t_pool(tx, 3, 2, 1)
    a_out, a_idx = a_pool(ax, 3, 2, 1)
    np.testing.assert_array_equal(a_out.numpy(), t_out.detach().numpy())
    np.testing.assert_array_equal(a_idx.numpy(), t_idx.numpy())
    t_unpool, a_unpool = getattr(TF, f"max_unpool{dims}d"), getattr(F, f"max_unpool{dims}d")
    for output_size in (None, shape[2:]):
        t_up = t_unpool(t_out, t_idx, 3, 2, 1, output_size)
        a_up = a_unpool(a_out, a_idx, 3, 2, 1, output_size)
        np.testing.assert_array_equal(a_up.numpy(), t_up.detach().numpy())
    weights = np.random.default_rng(9).uniform(0.5, 1.5, t_up.shape).astype(np.float32)
    (t_up * torch.tensor(weights)).sum().backward()
    (a_up * ag.tensor(weights)).sum().backward()
    np.testing.assert_allclose(ax.grad.numpy(), tx.grad.numpy(), rtol=1e-6)
    t_module, a_module = getattr(torch.nn, f"MaxUnpool{dims}d")(3, 2, 1), getattr(nn, f"MaxUnpool{dims}d")(3, 2, 1)
    assert repr(a_module) == repr(t_module)
    np.testing.assert_array_equal(a_module(a_out, a_idx).numpy(), t_module(t_out, t_idx).detach().numpy())
    # unbatched
    np.testing.assert_array_equal(a_unpool(a_out[0], a_idx[0], 3, 2, 1).numpy(),
                                  t_unpool(t_out[0], t_idx[0], 3, 2, 1).detach().numpy())
    with pytest.raises(ValueError):
        a_unpool(a_out, a_idx, 3, 2, 1, tuple(s + 5 for s in shape[2:]))


# ===================================================================== 6. margin losses

@pytest.mark.parametrize("reduction", ["mean", "sum", "none"])
@pytest.mark.parametrize("p,margin,weighted", [(1, 1.0, False), (2, 0.7, False), (1, 1.5, True), (2, 1.0, True)])
def test_multi_margin_loss(reduction, p, margin, weighted):
    target = np.random.default_rng(10).integers(0, 6, 7)
    weight = np.random.default_rng(11).uniform(0.2, 2.0, 6).astype(np.float32)
    t_w, a_w = (torch.tensor(weight), ag.tensor(weight)) if weighted else (None, None)
    check_op([(7, 6), target], lambda x, y: TF.multi_margin_loss(x, y, p, margin, t_w, reduction=reduction),
             lambda x, y: F.multi_margin_loss(x, y, p, margin, a_w, reduction=reduction))
    check_op([(7, 6), target], torch.nn.MultiMarginLoss(p, margin, t_w, reduction=reduction),
             nn.MultiMarginLoss(p, margin, a_w, reduction=reduction))
    check_op([(6,), target[:1].reshape(())], lambda x, y: TF.multi_margin_loss(x, y, p, margin, reduction=reduction),
             lambda x, y: F.multi_margin_loss(x, y, p, margin, reduction=reduction))
    assert list(nn.MultiMarginLoss(weight=a_w).state_dict()) == list(torch.nn.MultiMarginLoss(weight=t_w).state_dict())


@pytest.mark.parametrize("reduction", ["mean", "sum", "none"])
def test_multilabel_margin_loss(reduction):
    target = np.array([[3, 0, -1, 1, 2], [1, 4, 2, 0, 3], [-1, 2, 2, 2, 2], [2, 2, 4, -1, 0]])
    check_op([(4, 5), target], lambda x, y: TF.multilabel_margin_loss(x, y, reduction=reduction),
             lambda x, y: F.multilabel_margin_loss(x, y, reduction=reduction))
    check_op([(4, 5), target], torch.nn.MultiLabelMarginLoss(reduction=reduction),
             nn.MultiLabelMarginLoss(reduction=reduction))
    check_op([(5,), target[0]], lambda x, y: TF.multilabel_margin_loss(x, y, reduction=reduction),
             lambda x, y: F.multilabel_margin_loss(x, y, reduction=reduction))


def test_margin_losses_reject_bad_targets():
    with pytest.raises(ValueError):
        F.multi_margin_loss(ag.zeros(3, 4), ag.tensor(np.array([0, 4, 1], np.int32)))
    with pytest.raises(ValueError):
        F.multilabel_margin_loss(ag.zeros(2, 3), ag.tensor(np.array([[0, 1, -1]], np.int32)))
    with pytest.raises(ValueError):
        nn.MultiMarginLoss(p=3)


# ===================================================================== SyncBatchNorm (one process)

@pytest.mark.parametrize("shape", [(6, 3), (4, 3, 5), (2, 3, 4, 5), (2, 3, 2, 3, 2)])
def test_sync_batch_norm_is_batch_norm_in_one_process(shape):
    theirs, ours = torch.nn.SyncBatchNorm(3, momentum=0.2), nn.SyncBatchNorm(3, momentum=0.2)
    # Ours follows torch 2.13, whose repr has ", bias=True"; torch before it has no such field.
    assert repr(ours).replace(", bias=True", "") == repr(theirs).replace(", bias=True", "")
    assert list(ours.state_dict()) == list(theirs.state_dict())
    check_op([shape], theirs, ours, low=-3.0, high=3.0)
    for name in ("running_mean", "running_var"):
        np.testing.assert_allclose(getattr(ours, name).numpy(), getattr(theirs, name).numpy(), rtol=1e-5, atol=1e-6)
    assert int(ours.num_batches_tracked.item()) == 1
    ours.eval(), theirs.eval()
    check_op([shape], theirs, ours, low=-3.0, high=3.0)
    with pytest.raises(ValueError):
        ours(ag.zeros(3))


def test_convert_sync_batchnorm_keeps_state():
    model = nn.Sequential(nn.Conv2d(2, 3, 3), nn.BatchNorm2d(3), nn.Sequential(nn.ReLU(), nn.BatchNorm1d(3)))
    model[1].weight = nn.Parameter(ag.tensor(np.array([0.5, 2.0, 1.5], np.float32)))
    model.eval()
    before = {k: v.numpy() for k, v in model.state_dict().items()}
    converted = nn.SyncBatchNorm.convert_sync_batchnorm(model)
    assert type(converted[1]) is nn.SyncBatchNorm and type(converted[2][1]) is nn.SyncBatchNorm
    assert type(converted[0]) is nn.Conv2d and not converted[1].training
    after = converted.state_dict()
    assert list(after) == list(before)
    for key, value in before.items():
        np.testing.assert_array_equal(after[key].numpy(), value)


@pytest.mark.parametrize("mode, align_corners", [("bilinear", True), ("bilinear", False), ("nearest", None)])
def test_upsample_passes_mode_and_align_corners_to_interpolate(mode, align_corners):
    x = np.random.default_rng(4).standard_normal((1, 2, 3, 4)).astype(np.float32)
    ours = ag.nn.Upsample(scale_factor=2, mode=mode, align_corners=align_corners)(ag.tensor(x))
    theirs = torch.nn.Upsample(scale_factor=2, mode=mode, align_corners=align_corners)(torch.tensor(x))
    np.testing.assert_allclose(ours.numpy(), theirs.numpy(), rtol=1e-5, atol=1e-6)
