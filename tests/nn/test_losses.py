"""Loss functions and modules against torch: values for every reduction and the
gradients of input and target (through the one torch-oracle helper, odd shapes)."""

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
rng = np.random.default_rng(0)


def _probabilities(shape, low=0.02, high=0.98):
    return rng.uniform(low, high, size=shape).astype(np.float32)


@pytest.mark.parametrize("reduction", REDUCTIONS)
@pytest.mark.parametrize("shape", [(7,), (3, 5), (2, 3, 4)])
def test_binary_cross_entropy(reduction, shape):
    check_op([_probabilities(shape), _probabilities(shape, 0.0, 1.0)],
             lambda x, t: TF.binary_cross_entropy(x, t, reduction=reduction),
             lambda x, t: F.binary_cross_entropy(x, t, reduction=reduction))


def test_binary_cross_entropy_weight_and_edges():
    x = np.array([[0.0, 1.0, 0.3], [0.5, 1e-30, 0.999]], np.float32)
    t = np.array([[0.0, 1.0, 1.0], [0.5, 1.0, 0.0]], np.float32)
    w = np.array([0.5, 2.0, 1.5], np.float32)
    for reduction in REDUCTIONS:
        check_op([x, t], lambda a, b: TF.binary_cross_entropy(a, b, torch.tensor(w), reduction=reduction),
                 lambda a, b: F.binary_cross_entropy(a, b, ag.tensor(w), reduction=reduction), rtol=1e-4)
    # x = 0 with t = 1: the log is clamped at -100, as torch.
    loss = F.binary_cross_entropy(ag.tensor([0.0]), ag.tensor([1.0]))
    assert loss.item() == pytest.approx(100.0)


@pytest.mark.parametrize("reduction", REDUCTIONS)
def test_binary_cross_entropy_with_logits_pos_weight(reduction):
    pos_weight = rng.uniform(0.5, 3.0, size=(5,)).astype(np.float32)
    weight = rng.uniform(0.5, 1.5, size=(4, 5)).astype(np.float32)
    check_op([(4, 5), _probabilities((4, 5), 0.0, 1.0)],
             lambda x, t: TF.binary_cross_entropy_with_logits(x, t, torch.tensor(weight), reduction=reduction,
                                                              pos_weight=torch.tensor(pos_weight)),
             lambda x, t: F.binary_cross_entropy_with_logits(x, t, ag.tensor(weight), reduction=reduction,
                                                             pos_weight=ag.tensor(pos_weight)),
             low=-30.0, high=30.0)


@pytest.mark.parametrize("reduction", REDUCTIONS)
@pytest.mark.parametrize("beta", [1.0, 0.5, 0.0])
def test_smooth_l1_loss(reduction, beta):
    check_op([(3, 7), (3, 7)], lambda x, t: TF.smooth_l1_loss(x, t, reduction=reduction, beta=beta),
             lambda x, t: F.smooth_l1_loss(x, t, reduction=reduction, beta=beta))


@pytest.mark.parametrize("reduction", REDUCTIONS)
@pytest.mark.parametrize("delta", [1.0, 0.3, 2.5])
def test_huber_loss(reduction, delta):
    check_op([(5, 3), (5, 3)], lambda x, t: TF.huber_loss(x, t, reduction=reduction, delta=delta),
             lambda x, t: F.huber_loss(x, t, reduction=reduction, delta=delta))


def test_huber_and_l1_with_weight():
    w = rng.uniform(0.1, 2.0, size=(4, 3)).astype(np.float32)
    for reduction in REDUCTIONS:
        check_op([(4, 3), (4, 3)], lambda x, t: TF.huber_loss(x, t, reduction=reduction, weight=torch.tensor(w)),
                 lambda x, t: F.huber_loss(x, t, reduction=reduction, weight=ag.tensor(w)))
        check_op([(4, 3), (4, 3)], lambda x, t: TF.l1_loss(x, t, reduction=reduction, weight=torch.tensor(w)),
                 lambda x, t: F.l1_loss(x, t, reduction=reduction, weight=ag.tensor(w)))


@pytest.mark.parametrize("reduction", REDUCTIONS + ["batchmean"])
@pytest.mark.parametrize("log_target", [False, True])
@pytest.mark.filterwarnings("ignore:reduction. .mean. divides")
def test_kl_div(reduction, log_target):
    logits = rng.standard_normal((3, 6)).astype(np.float32)
    log_probs = logits - np.log(np.exp(logits).sum(1, keepdims=True))
    target = _probabilities((3, 6), 0.0, 1.0)
    if log_target:
        target = np.log(target + 0.05).astype(np.float32)
    check_op([log_probs.astype(np.float32), target],
             lambda x, t: TF.kl_div(x, t, reduction=reduction, log_target=log_target),
             lambda x, t: F.kl_div(x, t, reduction=reduction, log_target=log_target))


def test_kl_div_zero_target_contributes_nothing():
    """t = 0 terms are 0, as torch's xlogy; the input gradient there is -t = 0. (The target's
    own gradient at t = 0 is finite here, where torch's is NaN.)"""
    log_probs = np.log(_probabilities((2, 5))).astype(np.float32)
    target = _probabilities((2, 5), 0.0, 1.0)
    target[0, 1] = target[1, 4] = 0.0
    check_op([log_probs, np.asarray(target)], lambda x, t: TF.kl_div(x, t.detach(), reduction="sum"),
             lambda x, t: F.kl_div(x, t.detach(), reduction="sum"))
    t = ag.tensor(target, requires_grad=True)
    F.kl_div(ag.tensor(log_probs), t, reduction="sum").backward()
    assert np.isfinite(t.grad.numpy()).all()


@pytest.mark.parametrize("reduction", REDUCTIONS)
def test_l1_loss_broadcasts(reduction):
    check_op([(4, 3), (3,)], lambda x, t: TF.l1_loss(x, t.expand(4, 3), reduction=reduction),
             lambda x, t: F.l1_loss(x, t, reduction=reduction))


# ---------------------------------------------------------------- modules

def _module_case(torch_module, ours, arrays, target_int=False):
    inputs = [torch.tensor(a, requires_grad=a.dtype.kind == "f") for a in arrays]
    ag_inputs = [ag.tensor(a, requires_grad=a.dtype.kind == "f") for a in arrays]
    if target_int:
        inputs[1] = torch.tensor(arrays[1].astype(np.int64))
        ag_inputs[1] = ag.tensor(arrays[1].astype(np.int32))
    expected = torch_module(*inputs)
    actual = ours(*ag_inputs)
    np.testing.assert_allclose(actual.numpy(), expected.detach().numpy(), rtol=1e-4, atol=1e-6)
    w = rng.uniform(0.5, 1.5, size=actual.shape).astype(np.float32)
    (expected * torch.tensor(w)).sum().backward()
    (actual * ag.tensor(w)).sum().backward()
    np.testing.assert_allclose(ag_inputs[0].grad.numpy(), inputs[0].grad.numpy(), rtol=1e-4, atol=1e-6)


@pytest.mark.filterwarnings("ignore:reduction. .mean. divides")
def test_loss_modules_match_torch():
    x, t = rng.standard_normal((4, 5)).astype(np.float32), rng.standard_normal((4, 5)).astype(np.float32)
    p, q = _probabilities((4, 5)), _probabilities((4, 5), 0.0, 1.0)
    weight = rng.uniform(0.5, 2.0, size=(5,)).astype(np.float32)
    log_probs = x - np.log(np.exp(x).sum(1, keepdims=True))
    classes = np.array([0, 4, 2, 4])
    for reduction in REDUCTIONS:
        _module_case(torch.nn.L1Loss(reduction=reduction), nn.L1Loss(reduction=reduction), [x, t])
        _module_case(torch.nn.SmoothL1Loss(reduction=reduction, beta=0.7),
                     nn.SmoothL1Loss(reduction=reduction, beta=0.7), [x, t])
        _module_case(torch.nn.HuberLoss(reduction=reduction, delta=0.4), nn.HuberLoss(reduction=reduction, delta=0.4),
                     [x, t])
        _module_case(torch.nn.BCELoss(torch.tensor(weight), reduction=reduction),
                     nn.BCELoss(ag.tensor(weight), reduction=reduction), [p, q])
        _module_case(torch.nn.BCEWithLogitsLoss(reduction=reduction, pos_weight=torch.tensor(weight)),
                     nn.BCEWithLogitsLoss(reduction=reduction, pos_weight=ag.tensor(weight)), [x, q])
        _module_case(torch.nn.NLLLoss(torch.tensor(weight), ignore_index=2, reduction=reduction),
                     nn.NLLLoss(ag.tensor(weight), ignore_index=2, reduction=reduction),
                     [log_probs.astype(np.float32), classes], target_int=True)
    for reduction in REDUCTIONS + ["batchmean"]:
        _module_case(torch.nn.KLDivLoss(reduction=reduction), nn.KLDivLoss(reduction=reduction),
                     [log_probs.astype(np.float32), p])
        _module_case(torch.nn.KLDivLoss(reduction=reduction, log_target=True),
                     nn.KLDivLoss(reduction=reduction, log_target=True), [log_probs.astype(np.float32), np.log(p)])


def test_nll_loss_on_log_softmax_equals_cross_entropy_like_torch():
    x = rng.standard_normal((6, 4, 3)).astype(np.float32)
    target = rng.integers(0, 4, size=(6, 3))
    check_op([x, target], lambda a, t: TF.nll_loss(TF.log_softmax(a, 1), t, reduction="sum"),
             lambda a, t: nn.NLLLoss(reduction="sum")(nn.LogSoftmax(dim=1)(a), t))


def test_loss_weights_are_buffers_in_the_state_dict_like_torch():
    w = np.ones(3, np.float32)
    for name, kwargs in [("NLLLoss", dict(weight=w)), ("BCELoss", dict(weight=w)),
                         ("BCEWithLogitsLoss", dict(weight=w, pos_weight=w)), ("BCEWithLogitsLoss", {})]:
        ours = getattr(nn, name)(**{k: ag.tensor(v) for k, v in kwargs.items()})
        theirs = getattr(torch.nn, name)(**{k: torch.tensor(v) for k, v in kwargs.items()})
        assert list(ours.state_dict()) == list(theirs.state_dict())


def test_legacy_size_average_and_reduce():
    x, t = ag.tensor([1.0, -2.0, 3.0]), ag.tensor([0.0, 0.0, 0.0])
    assert nn.L1Loss(size_average=False).reduction == "sum"
    assert nn.L1Loss(reduce=False).reduction == "none"
    assert nn.L1Loss(size_average=False)(x, t).item() == pytest.approx(6.0)


@pytest.mark.parametrize("call,match", [
    (lambda: F.binary_cross_entropy(ag.zeros(3), ag.zeros(4)), "shape"),
    (lambda: F.smooth_l1_loss(ag.zeros(3), ag.zeros(3), beta=-1.0), "beta"),
    (lambda: F.huber_loss(ag.zeros(3), ag.zeros(3), delta=0.0), "delta"),
    (lambda: F.kl_div(ag.zeros(3), ag.zeros(3), reduction="average"), "reduction"),
    (lambda: F.huber_loss(ag.zeros(3), ag.zeros(3), weight=ag.ones(2)), "weight"),
])
def test_bad_arguments_raise(call, match):
    with pytest.raises(ValueError, match=match):
        call()


# ---------------------------------------------------------------- activations and small modules

ACTIVATIONS = [
    ("LeakyReLU", dict(negative_slope=0.2)), ("ELU", dict(alpha=0.7)), ("Softplus", dict(beta=2.0, threshold=3.0)),
    ("Hardtanh", dict(min_val=-0.5, max_val=1.2)), ("ReLU6", {}), ("LogSigmoid", {}), ("Mish", {}),
    ("LogSoftmax", dict(dim=1)), ("LogSoftmax", dict(dim=-1)),
]


@pytest.mark.parametrize("name,kwargs", ACTIVATIONS, ids=[f"{n}-{k}" for n, k in ACTIVATIONS])
def test_activation_modules(name, kwargs):
    check_op([(3, 5, 2)], getattr(torch.nn, name)(**kwargs), getattr(nn, name)(**kwargs), low=-8.0, high=8.0)
    assert repr(getattr(nn, name)(**kwargs)) == repr(getattr(torch.nn, name)(**kwargs))


def test_unflatten():
    check_op([(2, 12, 3)], torch.nn.Unflatten(1, (3, 4)), nn.Unflatten(1, (3, 4)))
    check_op([(2, 12)], torch.nn.Unflatten(-1, (2, 2, 3)), nn.Unflatten(-1, (2, 2, 3)))


@pytest.mark.parametrize("name,shape", [("Dropout1d", (4, 6, 5)), ("Dropout2d", (3, 8, 2, 3)),
                                        ("Dropout2d", (8, 2, 3))])
def test_channel_dropout_zeroes_whole_channels(name, shape):
    ag.manual_seed(0)
    module = getattr(nn, name)(p=0.5)
    x = ag.tensor(rng.uniform(1.0, 2.0, size=shape).astype(np.float32), requires_grad=True)
    out = module(x)
    values = out.numpy() / x.numpy()
    spatial = 1 if name == "Dropout1d" else 2
    per_channel = values.reshape(values.shape[:values.ndim - spatial] + (-1,))
    assert np.allclose(per_channel, per_channel[..., :1])  # one factor per channel
    assert set(np.round(np.unique(per_channel), 5)) == {0.0, 2.0}
    out.sum().backward()
    np.testing.assert_allclose(x.grad.numpy(), values, rtol=1e-6)
    module.eval()
    np.testing.assert_array_equal(module(x).numpy(), x.numpy())


@pytest.mark.parametrize("options", [dict(), dict(label_smoothing=0.15), dict(ignore_index=3),
                                     dict(weight=True, label_smoothing=0.2, ignore_index=1)])
@pytest.mark.parametrize("reduction", REDUCTIONS)
def test_cross_entropy_module_extras(options, reduction):
    weight = rng.uniform(0.5, 2.0, size=(5,)).astype(np.float32)
    theirs = torch.nn.CrossEntropyLoss(**{**options, "weight": torch.tensor(weight) if options.get("weight") else None},
                                       reduction=reduction)
    ours = nn.CrossEntropyLoss(**{**options, "weight": ag.tensor(weight) if options.get("weight") else None},
                               reduction=reduction)
    target = np.array([3, 0, 4, 1, 3, 2, 1])
    _module_case(theirs, ours, [rng.standard_normal((7, 5)).astype(np.float32), target], target_int=True)
    assert list(ours.state_dict()) == list(theirs.state_dict())


def test_loss_signatures_take_torch_positional_order():
    assert nn.CrossEntropyLoss(None, None, 3).ignore_index == 3
    assert nn.MSELoss(None, None, "sum").reduction == "sum"
    assert nn.MSELoss(size_average=False).reduction == "sum"
    assert nn.NLLLoss(None, None, 5).ignore_index == 5


# ------------------------------------------------- reduction='mean' of class-index losses: two kernels


def _mean_case(logits, target, weight=None, ignore_index=-100, log_probs=False, scale=1.0):
    """Loss and d logits of cross_entropy (nll_loss when log_probs) against torch; NaN where torch's is."""
    tx = torch.tensor(logits, requires_grad=True)
    ax = ag.tensor(logits, requires_grad=True)
    kwargs = dict(ignore_index=ignore_index)
    t_fn, a_fn = (TF.nll_loss, F.nll_loss) if log_probs else (TF.cross_entropy, F.cross_entropy)
    expected = t_fn(tx, torch.tensor(target.astype(np.int64)),
                    weight=None if weight is None else torch.tensor(weight), **kwargs)
    actual = a_fn(ax, ag.tensor(target.astype(np.int32)), weight=None if weight is None else ag.tensor(weight),
                  **kwargs)
    assert actual.shape == ()
    np.testing.assert_allclose(actual.numpy(), expected.detach().numpy(), rtol=1e-5, atol=1e-6)
    (expected * scale).backward()
    (actual * scale).backward()
    np.testing.assert_allclose(ax.grad.numpy(), tx.grad.numpy(), rtol=1e-4, atol=1e-6)
    return actual


@pytest.mark.parametrize("shape", [(37, 11), (1, 3), (5, 4, 3, 2), (300, 7)])
@pytest.mark.parametrize("weighted", [False, True])
def test_cross_entropy_mean_matches_torch_with_weights_and_ignored_rows(shape, weighted):
    classes = shape[1]
    logits = rng.standard_normal(shape).astype(np.float32) * 3
    target = rng.integers(0, classes, size=(shape[0],) + shape[2:])
    if target.size > 2:
        target.flat[::3] = 1   # an ignored class on a third of the rows
    weight = rng.uniform(0.2, 2.0, size=classes).astype(np.float32) if weighted else None
    _mean_case(logits, target, weight, ignore_index=1 if target.size > 2 else -100, scale=2.5)
    log_probs = torch.log_softmax(torch.tensor(logits), 1).numpy()
    _mean_case(log_probs, target, weight, log_probs=True, scale=-0.5)


def test_cross_entropy_mean_edges_like_torch():
    logits = rng.standard_normal((6, 4)).astype(np.float32)
    target = np.array([0, 3, 2, 2, 1, 0])
    # every row ignored: 0/0 = NaN loss, zero gradients
    loss = _mean_case(logits, np.full(6, 2), ignore_index=2)
    assert np.isnan(loss.numpy())
    # large logits do not overflow; a NaN or inf logit spoils the loss (and its row's gradient) as in torch
    _mean_case(logits * 1e4, target)
    for bad in (np.nan, np.inf):
        spoiled = logits.copy()
        spoiled[4, 1] = bad
        x = ag.tensor(spoiled, requires_grad=True)
        got = F.cross_entropy(x, ag.tensor(target.astype(np.int32)))
        tx = torch.tensor(spoiled, requires_grad=True)
        want = TF.cross_entropy(tx, torch.tensor(target))
        assert np.isnan(got.numpy()) and np.isnan(want.item())
        got.backward()
        want.backward()
        np.testing.assert_array_equal(np.isnan(x.grad.numpy()), np.isnan(tx.grad.numpy()))


def test_cross_entropy_mean_takes_two_kernels_and_one_backward():
    """The fast path: rows + mean forward, one fused backward (general path: 5 and 4); other
    reductions and label smoothing keep the general path, with the same numbers as torch."""
    dev = ag.gpu()
    logits = rng.standard_normal((64, 10)).astype(np.float32)
    target = ag.tensor(rng.integers(0, 10, 64).astype(np.int32))
    counts = {}
    for name, kwargs in (("mean", {}), ("smoothed", dict(label_smoothing=0.1))):
        x = ag.tensor(logits, requires_grad=True)
        dev.synchronize()
        before = dev.stats["dispatches"]
        loss = F.cross_entropy(x, target, **kwargs)
        dev.flush()
        forward = dev.stats["dispatches"] - before
        loss.backward()
        x.grad.numpy()
        counts[name] = (forward, dev.stats["dispatches"] - before - forward)
    assert counts["mean"][0] == 2 and counts["mean"][1] <= 2   # the backward: its seed and one kernel
    assert counts["smoothed"][0] > 2


def test_cross_entropy_mean_over_many_rows_takes_the_general_path_alike():
    from anygpu.ops.lossfn import MEAN_ROWS
    rows = MEAN_ROWS + 3
    logits = rng.standard_normal((rows, 2)).astype(np.float32)
    _mean_case(logits, rng.integers(0, 2, rows))
    with pytest.raises(ValueError, match="cross_entropy_mean: at most"):
        dev = ag.gpu()
        dev.cross_entropy_mean(dev.upload(logits.reshape(-1)), dev.upload(np.zeros(rows, np.int32)),
                               dev.upload(np.ones(2, np.float32)), rows, 2)
