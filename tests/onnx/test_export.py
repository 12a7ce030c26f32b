"""anygpu.onnx.export against the real libraries: onnx's checker (with strict shape
inference) accepts every model, and onnxruntime (CPU) computes what anygpu computes, to
1e-5, on random inputs of odd sizes: one small model per mapped op, then whole models."""

from __future__ import annotations

import io

import numpy as np
import pytest

import anygpu as ag
import anygpu.nn as nn
import anygpu.nn.functional as F

onnx = pytest.importorskip("onnx")
ort = pytest.importorskip("onnxruntime")

from anygpu.nn.functional import embedding, linear  # noqa: E402  (bound by name here: export must see these calls)
from anygpu.onnx import UnsupportedOperatorError, export  # noqa: E402

TOL = 1e-5


class Fn(nn.Module):
    """A module whose forward is fn (parameters, when given, registered as p0, p1, ...)."""

    def __init__(self, fn, *params):
        super().__init__()
        self.fn = fn
        for i, p in enumerate(params):
            setattr(self, f"p{i}", nn.Parameter(p))

    def forward(self, *inputs):
        return self.fn(self, *inputs)


def _session(proto):
    onnx.checker.check_model(proto, full_check=True)
    options = ort.SessionOptions()
    options.intra_op_num_threads = 1
    return ort.InferenceSession(proto.SerializeToString(), options, providers=["CPUExecutionProvider"])


def _numpy_inputs(proto, inputs):
    types = {i.name: i.type.tensor_type.elem_type for i in proto.graph.input}
    feeds = {}
    for name, value in zip([i.name for i in proto.graph.input], inputs):
        feeds[name] = value.numpy().astype(onnx.helper.tensor_dtype_to_np_dtype(types[name]))
    return feeds


def _flat(value):
    if isinstance(value, (tuple, list)):
        return [leaf for item in value for leaf in _flat(item)]
    return [value] if isinstance(value, ag.Tensor) else []


def _other_inputs(inputs):
    """Inputs of the same shapes with other values (float ones redrawn), so a value the
    export baked in as a constant instead of computing it shows up as a mismatch."""
    rng = np.random.default_rng(99)
    return [ag.tensor(rng.standard_normal(t.shape).astype(np.float32)) if t.dtype.is_floating_point else t
            for t in inputs]


def check(model, *inputs, tol=TOL, **options):
    """Export model(*inputs), run it in onnxruntime, compare with anygpu's outputs (eval mode,
    which export uses too) on the traced inputs and on other values; return the proto."""
    model.eval()
    proto = export(model, inputs, None, **options)
    session = _session(proto)
    for feed in (inputs, _other_inputs(inputs)):
        got = session.run(None, _numpy_inputs(proto, feed))
        with ag.no_grad():
            want = [t.numpy() for t in _flat(model(*feed))]
        assert len(got) == len(want)
        for g, w in zip(got, want):
            assert g.shape == w.shape
            if w.dtype.kind in "biu":
                np.testing.assert_array_equal(g, w)
            else:
                np.testing.assert_allclose(g, w, rtol=tol, atol=tol)
    return proto


def ops_of(proto) -> list[str]:
    return [node.op_type for node in proto.graph.node]


def randn(*shape, seed=0):
    return ag.tensor(np.random.default_rng(seed + sum(shape)).standard_normal(shape).astype(np.float32))


def positive(*shape, seed=0):
    return ag.tensor(np.random.default_rng(seed).uniform(0.5, 2.0, shape).astype(np.float32))


# ===================================================================== one op at a time

ELEMENTWISE = {
    "add": lambda m, x, y: x + y, "add_scalar": lambda m, x, y: x + 2.5, "radd": lambda m, x, y: 1.5 + x,
    "sub": lambda m, x, y: x - y, "rsub": lambda m, x, y: 3.0 - x, "mul": lambda m, x, y: x * y,
    "rmul": lambda m, x, y: 0.5 * x, "div": lambda m, x, y: x / y.abs().add(0.5), "rdiv": lambda m, x, y: 1.0 / (x * x + 1),
    "pow": lambda m, x, y: x ** 2, "pow_tensor": lambda m, x, y: (x.abs() + 0.5) ** y, "rpow": lambda m, x, y: 2.0 ** x,
    "sqrt": lambda m, x, y: (x.abs() + 0.1).sqrt(), "rsqrt": lambda m, x, y: (x.abs() + 0.1).rsqrt(),
    "exp": lambda m, x, y: x.exp(), "log": lambda m, x, y: (x.abs() + 0.1).log(), "neg": lambda m, x, y: -x,
    "abs": lambda m, x, y: x.abs(), "square": lambda m, x, y: x.square(), "reciprocal": lambda m, x, y: (x.abs() + 1).reciprocal(),
    "sin_cos": lambda m, x, y: x.sin() + x.cos(), "erf": lambda m, x, y: ag.erf(x),
    "floor_ceil": lambda m, x, y: (x * 3).floor() + (y * 3).ceil(), "log1p": lambda m, x, y: ag.log1p(x.abs()),
    "maximum": lambda m, x, y: ag.maximum(x, y), "minimum": lambda m, x, y: ag.minimum(x, y),
    "clamp": lambda m, x, y: x.clamp(-0.3, 0.4), "clamp_min": lambda m, x, y: x.clamp(min=0.1),
    "where_gt": lambda m, x, y: ag.where(x > y, x, y * 2), "where_scalar": lambda m, x, y: ag.where(x < 0, 0.0, x),
    "compare": lambda m, x, y: ((x >= y).float() + (x <= 0.1).float() + (x == x).float() + (x != y).float()),
    "masked_fill": lambda m, x, y: x.masked_fill(y > 0.5, -7.0),
    "logical": lambda m, x, y: ((x > 0) & (y > 0)).float() + ((x > 0) | ~(y > 0)).float(),
    "sign": lambda m, x, y: x.sign(), "trunc_round": lambda m, x, y: (x * 4).trunc() + (y * 4).round(),
    "named_methods": lambda m, x, y: x.add(y).sub(y * 3).mul(y).div(y.abs() + 1).true_divide(2.0).pow(2),
    "named_compares": lambda m, x, y: (x.eq(y).float() + x.ne(y).float() + x.lt(y).float() + x.le(0.1).float()
                                       + x.gt(y).float() + x.ge(-0.2).float()),
    "named_logical": lambda m, x, y: (ag.logical_and(x > 0, y > 0).float() + ag.logical_or(x > 0, y > 0).float()
                                      + ag.logical_xor(x > 0, y > 0).float() + ag.logical_not(x > 0).float()),
    "max_min_elementwise": lambda m, x, y: ag.max(x, y) - ag.min(x, y),
    "trigonometric": lambda m, x, y: ag.atan(x) + (x * 0.5).tan() + (x.clamp(-0.9, 0.9)).asin() + ag.acos(y.clamp(-0.9, 0.9)),
    "hyperbolic": lambda m, x, y: x.sinh() + y.cosh(),
    "rmatmul": lambda m, x, y: np.ones((2, 3), np.float32) @ x[0, :3],
}


@pytest.mark.parametrize("name", sorted(ELEMENTWISE))
def test_elementwise(name):
    check(Fn(ELEMENTWISE[name]), randn(3, 5, 7), randn(3, 5, 7, seed=1))


def test_broadcasting_and_integer_inputs():
    check(Fn(lambda m, x, b: x * b + b), randn(2, 3, 5), randn(5, seed=3))
    ids = ag.tensor(np.array([[1, 4, 2], [0, 3, 3]], np.int32))
    check(Fn(lambda m, i: (i * 2 + 1, (i > 1).float().sum(1))), ids)


ACTIVATIONS = {
    "relu": nn.ReLU(), "gelu": nn.GELU(), "gelu_tanh": nn.GELU(approximate="tanh"), "silu": nn.SiLU(),
    "sigmoid": nn.Sigmoid(), "tanh": nn.Tanh(), "leaky_relu": nn.LeakyReLU(0.23), "elu": nn.ELU(0.7),
    "softplus": nn.Softplus(), "softplus_beta": nn.Softplus(beta=2.0, threshold=3.0),
    "hardtanh": nn.Hardtanh(-0.5, 0.7), "relu6": nn.ReLU6(), "mish": nn.Mish(), "logsigmoid": nn.LogSigmoid(),
    "hardsigmoid": nn.Hardsigmoid(), "hardswish": nn.Hardswish(), "selu": nn.SELU(), "celu": nn.CELU(0.8),
    "softsign": nn.Softsign(), "tanhshrink": nn.Tanhshrink(), "prelu": nn.PReLU(),
    "softmax": nn.Softmax(dim=1), "log_softmax": nn.LogSoftmax(dim=-1), "softmin": nn.Softmin(dim=2),
}


@pytest.mark.parametrize("name", sorted(ACTIVATIONS))
def test_activation(name):
    x = randn(3, 5, 7) * 4.0
    check(ACTIVATIONS[name], x)


def test_softmax_functional_forms():
    check(Fn(lambda m, x: (F.softmax(x, dim=0), F.log_softmax(x, -1), x.softmax(1), ag.log_softmax(x, 2))),
          randn(3, 5, 7))


def test_gelu_forms_are_different_patterns():
    exact = check(nn.GELU(), randn(4, 9))
    approx = check(nn.GELU(approximate="tanh"), randn(4, 9))
    assert "Erf" in ops_of(exact) and "Tanh" in ops_of(approx)


def test_linear():
    ag.manual_seed(1)
    proto = check(nn.Linear(7, 5), randn(3, 7))
    assert "Gemm" in ops_of(proto)
    proto = check(nn.Linear(7, 5), randn(2, 3, 7))
    assert "MatMul" in ops_of(proto)
    check(nn.Linear(7, 5, bias=False), randn(3, 7))
    check(nn.Linear(7, 5, bias=False), randn(2, 3, 7))
    names = {i.name for i in export(nn.Linear(7, 5), (randn(3, 7),), None).graph.initializer}
    assert names == {"weight", "bias"}


@pytest.mark.parametrize("options", [
    dict(), dict(stride=2, padding=1), dict(padding=2, dilation=2), dict(groups=2, padding=1),
    dict(padding="same"), dict(padding="valid", stride=(2, 1)), dict(bias=False),
])
def test_conv2d(options):
    ag.manual_seed(2)
    kernel = 4 if options.get("padding") == "same" else 3
    proto = check(nn.Conv2d(4, 6, kernel, **options), randn(2, 4, 9, 7))
    assert "Conv" in ops_of(proto)


def test_conv2d_unbatched_and_conv1d():
    ag.manual_seed(3)
    check(nn.Conv2d(3, 5, 3, padding=1), randn(3, 7, 5))
    check(nn.Conv1d(3, 5, 3, stride=2, padding=1), randn(2, 3, 11))
    check(nn.Conv1d(3, 4, 2, padding="same", dilation=2), randn(2, 3, 9))


@pytest.mark.parametrize("options", [dict(), dict(stride=2), dict(stride=2, padding=1, output_padding=1),
                                     dict(stride=3, dilation=2, groups=2)])
def test_conv_transpose2d(options):
    ag.manual_seed(4)
    proto = check(nn.ConvTranspose2d(4, 6, 3, **options), randn(2, 4, 5, 7))
    assert "ConvTranspose" in ops_of(proto)


def test_conv_transpose1d():
    ag.manual_seed(5)
    check(nn.ConvTranspose1d(3, 5, 3, stride=2, padding=1), randn(2, 3, 9))


def _with_stats(norm):
    channels = norm.num_features
    norm.running_mean.copy_(randn(channels, seed=7))
    norm.running_var.copy_(positive(channels, seed=8))
    norm.weight.data.copy_(randn(channels, seed=9))
    norm.bias.data.copy_(randn(channels, seed=10))
    return norm


def test_batch_norm_eval():
    proto = check(_with_stats(nn.BatchNorm2d(5)), randn(3, 5, 7, 3))
    assert "BatchNormalization" in ops_of(proto)
    check(_with_stats(nn.BatchNorm1d(5)), randn(3, 5))
    check(_with_stats(nn.BatchNorm1d(5)), randn(3, 5, 9))


def test_batch_norm_module_left_in_training_mode_is_exported_in_eval():
    norm = _with_stats(nn.BatchNorm2d(5)).train()
    x = randn(3, 5, 7, 3)
    proto = export(norm, (x,), None)
    assert norm.training  # restored
    norm.eval()
    got = _session(proto).run(None, {"input_0": x.numpy()})[0]
    np.testing.assert_allclose(got, norm(x).numpy(), rtol=TOL, atol=TOL)


@pytest.mark.parametrize("opset", [13, 17, 18])
def test_layer_norm(opset):
    ag.manual_seed(6)
    norm = nn.LayerNorm((5, 7))
    norm.weight.data.copy_(randn(5, 7, seed=11))
    proto = check(norm, randn(3, 5, 7), opset_version=opset)
    assert ("LayerNormalization" in ops_of(proto)) == (opset >= 17)
    check(nn.LayerNorm(7, elementwise_affine=False), randn(3, 5, 7), opset_version=opset)


def test_group_norm():
    norm = nn.GroupNorm(3, 6)
    norm.weight.data.copy_(randn(6, seed=12))
    norm.bias.data.copy_(randn(6, seed=13))
    check(norm, randn(2, 6, 5, 3))
    check(norm, randn(2, 6, 7))
    check(nn.GroupNorm(2, 6, affine=False), randn(3, 6, 5, 5) * 3.0)


@pytest.mark.parametrize("module", [
    nn.MaxPool2d(2), nn.MaxPool2d(3, stride=2, padding=1), nn.MaxPool2d(2, stride=1, dilation=2),
    nn.AvgPool2d(2), nn.AvgPool2d(3, stride=2, padding=1), nn.AvgPool2d(3, stride=2, padding=1, count_include_pad=False),
    nn.AdaptiveAvgPool2d(1), nn.AdaptiveAvgPool2d((3, 2)), nn.MaxPool1d(3, stride=2), nn.AvgPool1d(2),
], ids=lambda m: repr(m))
def test_pooling(module):
    x = randn(2, 3, 9, 6) if not isinstance(module, (nn.MaxPool1d, nn.AvgPool1d)) else randn(2, 3, 11)
    check(module, x)


def test_global_average_pool():
    proto = check(nn.AdaptiveAvgPool2d((1, 1)), randn(2, 5, 7, 3))
    assert "GlobalAveragePool" in ops_of(proto)


def test_embedding():
    ag.manual_seed(7)
    table = nn.Embedding(11, 5)
    ids = ag.tensor(np.array([[1, 10, 3], [0, 7, 7]], np.int64))
    proto = check(table, ids)
    assert "Gather" in ops_of(proto)


@pytest.mark.parametrize("kind", ["plain", "causal", "float_mask", "bool_mask", "scale"])
def test_scaled_dot_product_attention(kind):
    q, k, v = randn(2, 3, 5, 4), randn(2, 3, 7, 4, seed=1), randn(2, 3, 7, 6, seed=2)
    if kind == "causal":
        k, v = randn(2, 3, 5, 4, seed=1), randn(2, 3, 5, 6, seed=2)
        fn = lambda m, q, k, v: F.scaled_dot_product_attention(q, k, v, is_causal=True)  # noqa: E731
    elif kind == "float_mask":
        mask = randn(5, 7, seed=3)
        fn = lambda m, q, k, v: F.scaled_dot_product_attention(q, k, v, attn_mask=mask)  # noqa: E731
    elif kind == "bool_mask":
        keep = np.random.default_rng(4).random((2, 1, 5, 7)) > 0.3
        keep[..., 0] = True
        mask = ag.tensor(keep.astype(np.int32))
        fn = lambda m, q, k, v: F.scaled_dot_product_attention(q, k, v, attn_mask=mask)  # noqa: E731
    elif kind == "scale":
        fn = lambda m, q, k, v: F.scaled_dot_product_attention(q, k, v, scale=0.3)  # noqa: E731
    else:
        fn = lambda m, q, k, v: F.scaled_dot_product_attention(q, k, v)  # noqa: E731
    proto = check(Fn(fn), q, k, v)
    assert {"MatMul", "Softmax"} <= set(ops_of(proto))


SHAPES = {
    "reshape": lambda m, x: x.reshape(3, 35), "view": lambda m, x: x.view(-1, 7), "flatten": lambda m, x: x.flatten(1),
    "flatten_module": lambda m, x: nn.Flatten()(x), "unflatten": lambda m, x: x.unflatten(2, (7, 1)),
    "transpose": lambda m, x: x.transpose(0, 2), "t": lambda m, x: x[0].t(), "T": lambda m, x: x[0].T,
    "permute": lambda m, x: x.permute(2, 0, 1), "squeeze": lambda m, x: x[:, :1].squeeze(1),
    "squeeze_all": lambda m, x: x[:1, :, :1].squeeze(), "unsqueeze": lambda m, x: x.unsqueeze(1).unsqueeze(-1),
    "cat": lambda m, x: ag.cat([x, x * 2, x[:, :2]], dim=1), "cat_last": lambda m, x: ag.cat([x, -x], -1),
    "stack": lambda m, x: ag.stack([x, x + 1], dim=1), "slice": lambda m, x: x[1:, ::2, 2:-1],
    "index_int": lambda m, x: x[1, :, -1], "index_none_ellipsis": lambda m, x: x[None, ..., 3],
    "index_negative": lambda m, x: x[-1][-2:], "index_list": lambda m, x: x[:, [4, 0, 2]],
    "index_tensor": lambda m, x: x[ag.tensor(np.array([2, 0], np.int64))],
    "index_select": lambda m, x: x.index_select(2, ag.tensor(np.array([6, 1, 1], np.int64))),
    "chunk": lambda m, x: x.chunk(3, dim=2), "split": lambda m, x: x.split([2, 3], dim=1),
    "narrow": lambda m, x: x.narrow(2, 1, 4), "unbind": lambda m, x: x.unbind(0),
    "expand": lambda m, x: x[:, :1].expand(3, 4, 7), "expand_as": lambda m, x: x[:1].expand_as(x),
    "contiguous_clone_detach": lambda m, x: x.permute(1, 0, 2).contiguous().clone() + x.detach().sum(),
    "gather": lambda m, x: x.gather(2, ag.tensor(np.array([[[1, 0]] * 5] * 3, np.int64))),
    "pad": lambda m, x: F.pad(x, (1, 2, 0, 1)), "pad_value": lambda m, x: F.pad(x, (2, 1), value=-3.0),
    "pad_reflect": lambda m, x: F.pad(x, (2, 1), mode="reflect"),
    "pad_replicate": lambda m, x: F.pad(x.unsqueeze(0), (2, 1, 1, 0), mode="replicate"),
    "casts": lambda m, x: ((x > 0).long() + (x > 0.5).int()).float() * 0.5 + x.to(ag.float32),
    "view_as_reshape_as": lambda m, x: (x[0].view_as(x[1]) + x[1].reshape_as(x[2]), x.cpu() + x.cuda()),
    "amin": lambda m, x: x.amin(-1, keepdim=True),
    "swapaxes": lambda m, x: x.swapaxes(0, 1), "movedim": lambda m, x: x.movedim(0, 2),
    "mT": lambda m, x: x.mT,
    "adaptive_avg_pool1d": lambda m, x: F.adaptive_avg_pool1d(x, 1) + F.adaptive_avg_pool1d(x, 7).mean(-1, keepdim=True),
    "dropout_variants": lambda m, x: F.dropout1d(x, 0.5, training=False) + F.dropout2d(x.unsqueeze(0), 0.5, False)[0],
}


@pytest.mark.parametrize("name", sorted(SHAPES))
def test_shape_op(name):
    check(Fn(SHAPES[name]), randn(3, 5, 7))


REDUCTIONS = {
    "sum_all": lambda m, x: x.sum(), "sum_dim": lambda m, x: x.sum(1), "sum_dims_keep": lambda m, x: x.sum((0, 2), keepdim=True),
    "mean_all": lambda m, x: x.mean(), "mean_dim": lambda m, x: x.mean(-1), "mean_keep": lambda m, x: x.mean(1, keepdim=True),
    "max_all": lambda m, x: x.max(), "max_dim": lambda m, x: x.max(1), "min_dim_keep": lambda m, x: x.min(2, keepdim=True),
    "amax": lambda m, x: x.amax((0, 1)), "argmax": lambda m, x: x.argmax(-1), "argmin_all": lambda m, x: x.argmin(),
    "var_std": lambda m, x: (x.var(1), x.std(2, keepdim=True)), "logsumexp": lambda m, x: x.logsumexp(1),
    "torch_sum_mean": lambda m, x: ag.sum(x, 2) + ag.mean(x, dim=2),
}


@pytest.mark.parametrize("name", sorted(REDUCTIONS))
def test_reduction(name):
    check(Fn(REDUCTIONS[name]), randn(3, 5, 7))


def test_matmul_forms():
    w = randn(7, 4, seed=5)
    check(Fn(lambda m, x, y: (x @ y.transpose(-1, -2), ag.matmul(x, y.transpose(1, 2)), x[0].mm(y[0].t()),
                              x.bmm(y.transpose(1, 2)), x @ w)), randn(3, 5, 7), randn(3, 6, 7, seed=1))


def test_dropout_is_the_identity_in_eval():
    model = nn.Sequential(nn.Linear(5, 5), nn.Dropout(0.5), nn.ReLU(), nn.Dropout(0.2))
    proto = check(model, randn(3, 5))
    assert "Dropout" not in ops_of(proto)
    check(Fn(lambda m, x: F.dropout(x, 0.3, training=False)), randn(3, 5))


def test_dropout_in_training_mode_is_refused():
    with pytest.raises(UnsupportedOperatorError, match="dropout"):
        export(Fn(lambda m, x: F.dropout(x, 0.3, training=True)), (randn(3, 5),), None)


@pytest.mark.parametrize("options", [dict(scale_factor=2), dict(scale_factor=(3, 2)), dict(size=(10, 7)),
                                     dict(scale_factor=2, mode="nearest-exact")])
def test_interpolate(options):
    proto = check(Fn(lambda m, x: F.interpolate(x, **options)), randn(2, 3, 5, 3))
    assert "Resize" in ops_of(proto)


def test_upsample_module():
    check(nn.Upsample(scale_factor=2), randn(1, 2, 3, 5))


def test_in_place_ops():
    def forward(m, x):
        y = x * 2
        y += 1
        y.mul_(x)
        y.relu_()
        z = y.clone()
        return y + z.clamp_(max=3.0)
    check(Fn(forward), randn(3, 5))


def test_parameters_used_inside_forward_become_initializers():
    weight = randn(5, 4, seed=21)
    model = Fn(lambda m, x: x @ (m.p0 * 2).t() + m.p0.sum(), weight)
    proto = check(model, randn(3, 4))
    assert any(i.name == "p0" or i.name.startswith("const") for i in proto.graph.initializer)


# ===================================================================== errors and options

def test_unmapped_op_names_itself():
    with pytest.raises(UnsupportedOperatorError, match="'isnan'"):
        export(Fn(lambda m, x: x.isnan().float() + x), (randn(3, 5),), None)
    # sort's order comes from a kernel no mapping covers; only its values pass through a
    # mapped gather: the constant order must not be baked in
    with pytest.raises(UnsupportedOperatorError, match="'sort'"):
        export(Fn(lambda m, x: x.sort(dim=1)[0]), (randn(3, 5),), None)


def test_unmapped_op_on_integer_input_names_itself():
    ids = ag.tensor(np.array([[3, 1, 2]], np.int32))
    with pytest.raises(UnsupportedOperatorError, match="'sort'"):
        export(Fn(lambda m, i: i.argsort(1)), (ids,), None)


def test_data_dependent_reads_are_refused():
    with pytest.raises(UnsupportedOperatorError, match="item"):
        export(Fn(lambda m, x: x * x.sum().item()), (randn(3, 5),), None)
    with pytest.raises(UnsupportedOperatorError, match="index"):
        export(Fn(lambda m, x: x[x > 0]), (randn(3, 5),), None)


def test_unsupported_modes_are_refused():
    with pytest.raises(UnsupportedOperatorError, match="max_pool2d"):
        export(Fn(lambda m, x: F.max_pool2d(x, 2, return_indices=True)), (randn(1, 2, 4, 4),), None)
    with pytest.raises(UnsupportedOperatorError, match="adaptive_avg_pool2d"):
        export(nn.AdaptiveAvgPool2d(3), (randn(1, 2, 5, 5),), None)


def test_tracing_leaves_anygpu_unpatched_and_parameters_trainable():
    model = nn.Linear(3, 2)
    before = (ag.Tensor.__add__, F.linear, ag.cat)
    with pytest.raises(UnsupportedOperatorError):
        export(Fn(lambda m, x: model(x).isnan()), (randn(2, 3),), None)
    export(model, (randn(2, 3),), None)
    assert (ag.Tensor.__add__, F.linear, ag.cat) == before
    assert model.weight.requires_grad and model.bias.requires_grad
    assert not ag.onnx.is_in_onnx_export()


def test_bad_arguments():
    model = nn.Linear(3, 2)
    with pytest.raises(ValueError, match="opset_version"):
        export(model, (randn(2, 3),), None, opset_version=9)
    with pytest.raises(ValueError, match="dynamic_axes"):
        export(model, (randn(2, 3),), None, input_names=["x"], dynamic_axes={"nope": {0: "b"}})
    with pytest.raises(ValueError, match="input_names"):
        export(model, (randn(2, 3),), None, input_names=["x", "y"])
    with pytest.raises(ValueError, match="out of range"):
        export(model, (randn(2, 3),), None, input_names=["x"], dynamic_axes={"x": [4]})


def test_dynamic_axes_run_with_another_batch_size(tmp_path):
    ag.manual_seed(8)
    model = nn.Sequential(nn.Conv2d(2, 4, 3, padding=1), nn.ReLU(), nn.Flatten(), nn.Linear(4 * 5 * 3, 3))
    path = tmp_path / "m.onnx"
    proto = export(model, (randn(2, 2, 5, 3),), str(path), input_names=["x"], output_names=["y"],
                   dynamic_axes={"x": {0: "batch"}, "y": [0]})
    assert path.read_bytes() == proto.SerializeToString()
    dims = proto.graph.input[0].type.tensor_type.shape.dim
    assert dims[0].dim_param == "batch" and dims[1].dim_value == 2
    assert proto.graph.output[0].type.tensor_type.shape.dim[0].dim_param == "y_dynamic_axes_1"
    session = _session(onnx.load(str(path)))
    x = randn(7, 2, 5, 3, seed=4)
    np.testing.assert_allclose(session.run(None, {"x": x.numpy()})[0], model(x).numpy(), rtol=TOL, atol=TOL)


def test_dynamic_batch_through_attention_reshapes():
    ag.manual_seed(9)
    layer = nn.TransformerEncoderLayer(8, 2, dim_feedforward=12, batch_first=True).eval()
    proto = export(layer, (randn(2, 5, 8),), None, input_names=["src"], dynamic_axes={"src": {0: "n"},
                                                                                     "output_0": {0: "n"}})
    x = randn(3, 5, 8, seed=2)
    got = _session(proto).run(None, {"src": x.numpy()})[0]
    np.testing.assert_allclose(got, layer(x).numpy(), rtol=TOL, atol=TOL)


def test_writes_to_a_file_object_and_keyword_inputs():
    class Scaled(nn.Module):
        def forward(self, x, scale=1.0):
            return x * scale

    model = Scaled()
    buffer = io.BytesIO()
    export(model, (randn(2, 3), {"scale": 3.0}), buffer)
    proto = onnx.load_from_string(buffer.getvalue())
    got = _session(proto).run(None, {"input_0": randn(2, 3).numpy()})[0]
    np.testing.assert_allclose(got, randn(2, 3).numpy() * 3.0, rtol=TOL)


def test_export_params_false_makes_parameters_inputs():
    model = nn.Linear(3, 2)
    proto = export(model, (randn(2, 3),), None, export_params=False)
    assert {i.name for i in proto.graph.input} == {"input_0", "weight", "bias"}
    assert not proto.graph.initializer
    feeds = {"input_0": randn(2, 3).numpy(), "weight": model.weight.numpy(), "bias": model.bias.numpy()}
    np.testing.assert_allclose(_session(proto).run(None, feeds)[0], model(randn(2, 3)).numpy(), rtol=TOL, atol=TOL)


def test_torch_onnx_names_resolve_to_anygpu():
    assert ag.onnx.export is export
    assert ag.onnx.errors.UnsupportedOperatorError is UnsupportedOperatorError
    assert issubclass(UnsupportedOperatorError, ag.onnx.errors.OnnxExporterError)
    assert issubclass(UnsupportedOperatorError, ValueError)


# ===================================================================== whole models

def test_digits_cnn():
    from anygpu.train.stratagems import digits_cnn
    ag.manual_seed(10)
    proto = check(digits_cnn(), randn(5, 1, 8, 8))
    assert ops_of(proto)[:2] == ["Conv", "Relu"]


def test_mlp():
    ag.manual_seed(11)
    model = nn.Sequential(nn.Linear(13, 17), nn.GELU(), nn.Linear(17, 9), nn.Tanh(), nn.LayerNorm(9),
                          nn.Linear(9, 3), nn.LogSoftmax(dim=1))
    check(model, randn(6, 13))


@pytest.mark.parametrize("norm_first", [False, True])
def test_transformer_encoder_layer(norm_first):
    ag.manual_seed(12)
    layer = nn.TransformerEncoderLayer(12, 3, dim_feedforward=20, batch_first=True, norm_first=norm_first,
                                       activation="gelu")
    check(layer, randn(2, 5, 12))


def test_transformer_encoder_with_causal_mask_sequence_first():
    ag.manual_seed(13)
    encoder = nn.TransformerEncoder(nn.TransformerEncoderLayer(8, 2, dim_feedforward=16), num_layers=2)
    mask = nn.Transformer.generate_square_subsequent_mask(5)
    model = Fn(lambda m, x: m.encoder(x, mask=mask))
    model.encoder = encoder
    check(model, randn(5, 3, 8))


def test_multihead_attention_with_weights_and_padding_mask():
    ag.manual_seed(19)
    attention = nn.MultiheadAttention(8, 2, batch_first=True)
    padding = np.zeros((2, 6), bool)
    padding[1, 4:] = True  # the second sequence's last two keys are padding
    model = Fn(lambda m, q, kv: m.attention(q, kv, kv, key_padding_mask=padding))
    model.attention = attention
    check(model, randn(2, 5, 8), randn(2, 6, 8, seed=1))


class Block(nn.Module):
    """A GPT-style block: token + position embeddings, causal SDPA, MLP."""

    def __init__(self, vocab=13, dim=12, heads=3, length=7):
        super().__init__()
        self.heads = heads
        self.tokens = nn.Embedding(vocab, dim)
        self.positions = nn.Embedding(length, dim)
        self.norm1, self.norm2 = nn.LayerNorm(dim), nn.LayerNorm(dim)
        self.qkv = nn.Linear(dim, 3 * dim)
        self.proj = nn.Linear(dim, dim)
        self.mlp = nn.Sequential(nn.Linear(dim, 4 * dim), nn.GELU(approximate="tanh"), nn.Linear(4 * dim, dim))
        self.head = nn.Linear(dim, vocab, bias=False)

    def forward(self, ids):
        n, t = ids.shape
        x = self.tokens(ids) + self.positions(ag.arange(t))
        q, k, v = self.qkv(self.norm1(x)).split(x.shape[-1], dim=2)
        q, k, v = (z.view(n, t, self.heads, -1).transpose(1, 2) for z in (q, k, v))
        y = F.scaled_dot_product_attention(q, k, v, is_causal=True).transpose(1, 2).reshape(n, t, -1)
        x = x + self.proj(y)
        x = x + self.mlp(self.norm2(x))
        return self.head(x)


def test_hand_built_attention_block():
    ag.manual_seed(14)
    ids = ag.tensor(np.random.default_rng(5).integers(0, 13, (3, 7)).astype(np.int64))
    check(Block(), ids)


def test_starter_diffusion_unet():
    from anygpu.infer import starter_model_path
    from anygpu.train import modelfile
    from anygpu.train.diffusion import sinusoidal_embedding
    model = modelfile.read(starter_model_path())
    network = model.build()
    x = randn(1, *model.input_shape)
    features = ag.tensor(sinusoidal_embedding(np.array([37]), network.width))
    proto = check(network, x, features)
    assert {"Conv", "InstanceNormalization", "Resize", "Concat"} <= set(ops_of(proto))


def test_small_unet_with_dynamic_batch():
    from anygpu.train.diffusion import TinyUNet, sinusoidal_embedding
    ag.manual_seed(15)
    network = TinyUNet(channels=3, width=8).eval()
    x, features = randn(2, 3, 8, 12), ag.tensor(sinusoidal_embedding(np.array([3, 150]), 8))
    check(network, x, features)
    proto = export(network, (x, features), None, input_names=["x", "t"], output_names=["eps"],
                   dynamic_axes={"x": {0: "n"}, "t": {0: "n"}, "eps": {0: "n"}})
    x3, f3 = randn(3, 3, 8, 12, seed=6), ag.tensor(sinusoidal_embedding(np.array([1, 2, 199]), 8))
    got = _session(proto).run(None, {"x": x3.numpy(), "t": f3.numpy()})[0]
    np.testing.assert_allclose(got, network(x3, f3).numpy(), rtol=TOL, atol=TOL)


# ===================================================================== the CLI

def test_cli_exports_a_trained_model_file(tmp_path, capsys):
    from anygpu.cli import main
    from anygpu.io.datasets import load_digits
    from anygpu.train import modelfile
    out = tmp_path / "run"
    assert main(["train", "digits", "--limit", "96", "--batch-size", "16", "--epochs", "1", "--out", str(out)]) == 0
    target = tmp_path / "digits.onnx"
    assert main(["export", str(out / "model.safetensors"), str(target)]) == 0
    assert f"wrote {target}" in capsys.readouterr().out
    proto = onnx.load(str(target))
    meta = {p.key: p.value for p in proto.metadata_props}
    assert meta["stratagem"] == '"digits"' and "classes" in meta and "preprocess" in meta
    network = modelfile.read(out / "model.safetensors").build()
    _, test = load_digits(seed=0)
    images = np.asarray(test.x[:9], np.float32).reshape(9, 1, 8, 8)
    got = _session(proto).run(None, {"image": images})[0]
    np.testing.assert_allclose(got, network(ag.tensor(images)).numpy(), rtol=TOL, atol=TOL)


def test_cli_export_errors_are_one_line(tmp_path, capsys):
    from anygpu.cli import main
    from anygpu.infer import starter_model_path
    missing = tmp_path / "none.safetensors"
    assert main(["export", str(missing), str(tmp_path / "x.onnx")]) == 2
    assert capsys.readouterr().err.count("\n") == 1
    tampered = tmp_path / "tampered.safetensors"
    data = bytearray(starter_model_path().read_bytes())
    data[len(data) // 2] ^= 1
    tampered.write_bytes(bytes(data))
    assert main(["export", str(tampered), str(tmp_path / "x.onnx")]) == 1
    assert capsys.readouterr().err.count("\n") == 1
    assert not (tmp_path / "x.onnx").exists()



# ===================================================================== older opsets, older scripts

class StyleNet(nn.Module):
    """fast_neural_style's TransformerNet in small: reflection-padded convolutions, instance
    norm, a residual block, nearest upsampling."""

    def __init__(self, width=6):
        super().__init__()
        self.pad = nn.ReflectionPad2d(1)
        self.conv1 = nn.Conv2d(3, width, 3)
        self.in1 = nn.InstanceNorm2d(width, affine=True)
        self.down = nn.Conv2d(width, width, 3, stride=2)
        self.in2 = nn.InstanceNorm2d(width, affine=True)
        self.res = nn.Conv2d(width, width, 3)
        self.in3 = nn.InstanceNorm2d(width, affine=True)
        self.out = nn.Conv2d(width, 3, 3)

    def forward(self, x):
        y = F.relu(self.in1(self.conv1(self.pad(x))))
        y = F.relu(self.in2(self.down(self.pad(y))))
        y = y + self.in3(self.res(self.pad(y)))
        y = F.interpolate(y, mode="nearest", scale_factor=2)
        return self.out(self.pad(y))


@pytest.mark.parametrize("opset", [11, 12, 13])
def test_older_opsets(opset):
    ag.manual_seed(16)
    check(StyleNet(), randn(1, 3, 10, 8), opset_version=opset)
    check(Fn(lambda m, x: (x.softmax(1), F.log_softmax(x, 0), (x <= 0.2).float() + (x >= -0.1).float(),
                           x.unsqueeze(1).squeeze(1).sum(2))), randn(3, 5, 7), opset_version=opset)
    check(nn.TransformerEncoderLayer(8, 2, dim_feedforward=12, batch_first=True), randn(2, 5, 8), opset_version=opset)
    check(Fn(lambda m, x: F.interpolate(x, size=(7, 9))), randn(1, 2, 3, 4), opset_version=opset)


def test_legacy_underscore_export_returns_the_output(tmp_path):
    # fast_neural_style: output = torch.onnx._export(style_model, content_image, path, opset_version=11).cpu()
    ag.manual_seed(17)
    model = StyleNet()
    x = randn(1, 3, 10, 8)
    path = tmp_path / "style.onnx"
    output = ag.onnx._export(model, x, str(path), opset_version=11).cpu()
    assert not output.requires_grad
    model.eval()
    np.testing.assert_allclose(output.numpy(), model(x).numpy(), rtol=TOL, atol=TOL)
    got = _session(onnx.load(str(path))).run(None, {"input_0": x.numpy()})[0]
    np.testing.assert_allclose(got, output.numpy(), rtol=TOL, atol=TOL)


# ===================================================================== edge cases

def test_zero_dim_inputs_and_results():
    check(Fn(lambda m, x: x * 2 + x.exp()), ag.tensor(np.float32(1.5)))
    check(Fn(lambda m, x: (x.sum(), x.mean(0), x[0], x[0].max(0), x.sum().argmax())), randn(5))


def test_empty_batch():
    ag.manual_seed(18)
    check(nn.Linear(5, 3), ag.zeros(0, 5))
    check(Fn(lambda m, x: (x.relu() * 2).sum(1)), ag.zeros(0, 5))


def test_nan_and_inf_flow_as_in_anygpu():
    values = randn(3, 5).numpy()
    values[0, 1], values[1, 2], values[2, 3] = np.nan, np.inf, -np.inf
    x = ag.tensor(values)
    model = Fn(lambda m, x: (x.relu(), x * 2 + 1, x.sigmoid(), x.clamp(-1, 1), x.abs().sqrt(), F.gelu(x)))
    proto = export(model, (x,), None)
    got = _session(proto).run(None, _numpy_inputs(proto, (x,)))
    for g, w in zip(got, [t.numpy() for t in model(x)]):
        assert np.isnan(w).any()
        np.testing.assert_allclose(g, w, rtol=TOL, atol=TOL, equal_nan=True)


def test_cli_exports_the_starter_diffusion_model(tmp_path, capsys):
    from anygpu.cli import main
    from anygpu.infer import starter_model_path
    from anygpu.train import modelfile
    from anygpu.train.diffusion import sinusoidal_embedding
    target = tmp_path / "starter.onnx"
    assert main(["export", str(starter_model_path()), str(target), "--opset", "18"]) == 0
    proto = onnx.load(str(target))
    assert [i.name for i in proto.graph.input] == ["x_t", "time_features"]
    assert proto.opset_import[0].version == 18
    meta = {p.key: p.value for p in proto.metadata_props}
    assert '"timesteps": 200' in meta["diffusion"]
    network = modelfile.read(starter_model_path()).build()
    x, features = randn(3, 3, 32, 32, seed=5), sinusoidal_embedding(np.array([0, 50, 199]), network.width)
    got = _session(proto).run(None, {"x_t": x.numpy(), "time_features": features})[0]
    np.testing.assert_allclose(got, network(x, ag.tensor(features)).numpy(), rtol=TOL, atol=TOL)


SCRIPT = '''
import sys
import numpy as np
import torch
import torch.onnx
from torch import nn

model = nn.Sequential(nn.Conv2d(1, 4, 3), nn.ReLU(), nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(4, 2))
x = torch.randn(2, 1, 9, 7)
torch.onnx.export(model, (x,), sys.argv[1], input_names=["x"], output_names=["y"],
                  dynamic_axes={"x": {0: "batch"}, "y": {0: "batch"}}, opset_version=17)
np.save(sys.argv[2], x.numpy())
np.save(sys.argv[3], model(x).detach().numpy())
'''


def test_a_torch_script_exports_through_the_compat_import(tmp_path):
    import subprocess
    import sys
    from pathlib import Path
    shim = Path(__file__).resolve().parents[1] / "compat" / "torch_shim.py"
    script = tmp_path / "export_script.py"
    script.write_text(SCRIPT)
    paths = [tmp_path / "m.onnx", tmp_path / "x.npy", tmp_path / "y.npy"]
    run = subprocess.run([sys.executable, str(shim), "anygpu", str(script), *map(str, paths)],
                         capture_output=True, text=True, timeout=600)
    assert run.returncode == 0, run.stderr
    got = _session(onnx.load(str(paths[0]))).run(None, {"x": np.load(paths[1])})[0]
    np.testing.assert_allclose(got, np.load(paths[2]), rtol=TOL, atol=TOL)


def test_circular_pad_needs_opset_19():
    model = Fn(lambda m, x: F.pad(x, (2, 1, 1, 1), mode="circular"))
    check(model, randn(1, 2, 4, 5), opset_version=19)
    with pytest.raises(UnsupportedOperatorError, match="pad"):
        export(model, (randn(1, 2, 4, 5),), None, opset_version=17)


def test_functions_imported_by_name_in_user_code():
    # `from torch.nn.functional import embedding`: the module's own binding is traced too, so the
    # lookup of integer ids is not baked in as a constant of the traced ids
    ag.manual_seed(20)
    model = Fn(lambda m, ids: linear(embedding(ids, m.p0), m.p1), randn(11, 4), randn(3, 4, seed=2))
    proto = export(model, (ag.tensor(np.array([[1, 2, 3]], np.int64)),), None)
    other = np.array([[10, 0, 7]], np.int64)
    got = _session(proto).run(None, {"input_0": other})[0]
    np.testing.assert_allclose(got, model(ag.tensor(other)).numpy(), rtol=TOL, atol=TOL)


def test_functions_stored_on_modules():
    # a module keeping a function object (as TransformerEncoderLayer keeps activation=F.relu)
    ag.manual_seed(21)

    class Lookup(nn.Module):
        def __init__(self):
            super().__init__()
            self.table = nn.Embedding(9, 3)
            self.lookup = F.embedding

        def forward(self, ids):
            return self.lookup(ids, self.table.weight) * 2

    model = Lookup()
    proto = export(model, (ag.tensor(np.array([1, 2], np.int64)),), None)
    assert model.lookup is F.embedding
    other = np.array([8, 0], np.int64)
    got = _session(proto).run(None, {"input_0": other})[0]
    np.testing.assert_allclose(got, model(ag.tensor(other)).numpy(), rtol=TOL, atol=TOL)


def test_an_op_reached_out_of_sight_on_float_values_fails():
    import functools
    weight = randn(3, 4, seed=3)
    hidden = functools.partial(F.linear, weight=weight)  # a reference the tracer does not rebind
    with pytest.raises(UnsupportedOperatorError, match="did not see"):
        export(Fn(lambda m, x: hidden(x).relu()), (randn(2, 4),), None)
    with pytest.raises(UnsupportedOperatorError, match="'linear'.*did not see"):
        export(Fn(lambda m, x: hidden(x)), (randn(2, 4),), None)


def test_a_plain_function_and_float16_values():
    x = randn(3, 5).half()
    proto = export(lambda t: (t * 2 + 1).relu(), (x,), None)
    assert proto.graph.input[0].type.tensor_type.elem_type == onnx.TensorProto.FLOAT16
    got = _session(proto).run(None, {"input_0": x.numpy()})[0]
    assert got.dtype == np.float16
    np.testing.assert_allclose(got, ((x * 2 + 1).relu()).numpy(), rtol=1e-3, atol=1e-3)


MISSING_ONNX = '''
import sys
class NoOnnx:
    def find_spec(self, name, path=None, target=None):
        if name == "onnx" or name.startswith("onnx."):
            raise ModuleNotFoundError("No module named 'onnx'")
sys.meta_path.insert(0, NoOnnx())
import anygpu  # imports without onnx
try:
    anygpu.onnx.export(anygpu.nn.Linear(2, 2), (anygpu.zeros(1, 2),), None)
except ModuleNotFoundError as error:
    print(error)
'''


def test_without_the_onnx_package_the_error_names_the_extra():
    import subprocess
    import sys
    run = subprocess.run([sys.executable, "-c", MISSING_ONNX], capture_output=True, text=True, timeout=300)
    assert run.returncode == 0, run.stderr
    assert "pip install 'anygpu[onnx]'" in run.stdout
