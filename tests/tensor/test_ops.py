"""Every Tensor op and every nn.functional function against torch on the CPU.

Each case is (id, inputs, fn, tolerances): fn(m, *tensors) is written once and run with
m = torch's namespace and with anygpu's (m.lib is torch / anygpu, m.F the functional
module), through tests/tensor/helper.check_op (forward, then gradients of a random
weighted sum for every float input). The id before '/' names the op under test.
"""

from types import SimpleNamespace

import numpy as np
import pytest
import torch
import torch.nn.functional as TF

import anygpu as ag
import anygpu.nn.functional as F

from .helper import Inputs, check_op

pytestmark = [pytest.mark.filterwarnings("ignore:Using padding='same'"),  # torch's note on even kernels
              pytest.mark.filterwarnings("ignore:Implicit dimension choice")]  # torch's legacy softmax dim

TORCH = SimpleNamespace(lib=torch, F=TF)
ANYGPU = SimpleNamespace(lib=ag, F=F)
_inputs = Inputs(7)
pos, ints, grid, distinct = _inputs.pos, _inputs.ints, _inputs.grid, _inputs.distinct


def case(name, inputs, fn, **tol):
    return pytest.param(inputs, fn, tol, id=name)


TENSOR_CASES = [
    # ---------------------------------------------------------------- arithmetic and broadcasting
    case("add/same", [(3, 4), (3, 4)], lambda m, x, y: x + y),
    case("add/broadcast", [(3, 1), (1, 4)], lambda m, x, y: x + y),
    case("add/rank", [(2, 3, 4), (4,)], lambda m, x, y: x + y),
    case("add/scalar-right", [(3, 4)], lambda m, x: x + 1.5),
    case("add/scalar-left", [(3, 4)], lambda m, x: 2 + x),
    case("add/0d", [(), (2, 3)], lambda m, x, y: x + y),
    case("add/method", [(5,), (5,)], lambda m, x, y: x.add(y)),
    case("sub/broadcast", [(2, 1, 4), (3, 1)], lambda m, x, y: x - y),
    case("sub/scalar-right", [(3, 4)], lambda m, x: x - 0.5),
    case("sub/scalar-left", [(3, 4)], lambda m, x: 1.0 - x),
    case("mul/broadcast", [(4, 1), (3,)], lambda m, x, y: x * y),
    case("mul/scalar-both", [(3, 4)], lambda m, x: 3 * x * 0.5),
    case("mul/self", [(5,)], lambda m, x: x * x),
    case("div/broadcast", [(2, 3), pos(1, 3)], lambda m, x, y: x / y),
    case("div/scalar-right", [(3, 4)], lambda m, x: x / 4.0),
    case("div/scalar-left", [pos(3, 4)], lambda m, x: 2.0 / x),
    case("pow/tensor", [pos(3, 4), (3, 4)], lambda m, x, y: x ** y),
    case("pow/scalar-square", [(3, 4)], lambda m, x: x ** 2),
    case("pow/scalar-cube-negative-base", [(3, 4)], lambda m, x: x ** 3),
    case("pow/scalar-fraction", [pos(3, 4)], lambda m, x: x ** 0.5),
    case("pow/scalar-negative", [pos(3, 4)], lambda m, x: x ** -1.5),
    case("pow/scalar-base", [(3, 4)], lambda m, x: 2.0 ** x),
    case("neg", [(3, 4)], lambda m, x: -x),
    case("matmul/2d", [(3, 4), (4, 5)], lambda m, x, y: x @ y, atol=1e-4),
    case("matmul/vec-mat", [(4,), (4, 5)], lambda m, x, y: x @ y, atol=1e-4),
    case("matmul/mat-vec", [(3, 4), (4,)], lambda m, x, y: x @ y, atol=1e-4),
    case("matmul/dot", [(6,), (6,)], lambda m, x, y: x @ y, atol=1e-4),
    case("matmul/batched-2d", [(2, 3, 4), (4, 5)], lambda m, x, y: x @ y, atol=1e-4),
    case("matmul/batched", [(2, 3, 4), (2, 4, 5)], lambda m, x, y: x.matmul(y), atol=1e-4),
    case("matmul/broadcast-batch", [(2, 1, 3, 4), (3, 4, 2)], lambda m, x, y: m.lib.matmul(x, y), atol=1e-4),
    case("maximum", [grid(3, 4), grid(3, 1)], lambda m, x, y: x.maximum(y)),
    case("minimum", [distinct(3, 4), distinct(4)], lambda m, x, y: x.minimum(y)),
    # ---------------------------------------------------------------- comparisons (0/1 masks)
    case("eq", [grid(3, 4), grid(3, 4)], lambda m, x, y: x == y),
    case("eq/scalar", [grid(3, 4)], lambda m, x: x == 1.0),
    case("ne", [grid(3, 4), grid(4)], lambda m, x, y: x != y),
    case("lt", [grid(3, 4), grid(3, 1)], lambda m, x, y: x < y),
    case("le", [grid(3, 4), grid(3, 4)], lambda m, x, y: x <= y),
    case("gt/scalar", [grid(3, 4)], lambda m, x: x > 0),
    case("ge/scalar-left", [grid(3, 4)], lambda m, x: 0.5 >= x),
    # ---------------------------------------------------------------- unary math
    case("exp", [(3, 4)], lambda m, x: x.exp()),
    case("log", [pos(3, 4)], lambda m, x: x.log()),
    case("sqrt", [pos(3, 4)], lambda m, x: x.sqrt()),
    case("rsqrt", [pos(3, 4)], lambda m, x: x.rsqrt()),
    case("reciprocal", [pos(3, 4)], lambda m, x: x.reciprocal()),
    case("abs", [(3, 4)], lambda m, x: x.abs()),
    case("abs/builtin", [(3, 4)], lambda m, x: abs(x)),
    case("square", [(3, 4)], lambda m, x: x.square()),
    case("sin", [(3, 4)], lambda m, x: x.sin()),
    case("cos", [(3, 4)], lambda m, x: x.cos()),
    case("clamp/both", [(3, 4)], lambda m, x: x.clamp(-0.5, 0.7)),
    case("clamp/min", [(3, 4)], lambda m, x: x.clamp(min=0.1)),
    case("clamp/max", [(3, 4)], lambda m, x: x.clamp(max=0.2)),
    case("relu", [(3, 4)], lambda m, x: x.relu()),
    case("sigmoid", [(3, 4)], lambda m, x: x.sigmoid()),
    case("tanh", [(3, 4)], lambda m, x: x.tanh()),
    # ---------------------------------------------------------------- reductions
    case("sum/all", [(3, 4)], lambda m, x: x.sum()),
    case("sum/dim", [(3, 4, 5)], lambda m, x: x.sum(1)),
    case("sum/dims-keepdim", [(3, 4, 5)], lambda m, x: x.sum((0, 2), keepdim=True)),
    case("sum/negative-dim", [(3, 4, 5)], lambda m, x: x.sum(-1)),
    case("mean/all", [(3, 4)], lambda m, x: x.mean()),
    case("mean/dim", [(3, 4, 5)], lambda m, x: x.mean(0)),
    case("mean/dims-keepdim", [(3, 4, 5)], lambda m, x: x.mean((1, 2), keepdim=True)),
    case("max/all", [distinct(3, 4)], lambda m, x: x.max()),
    case("max/all-ties", [grid(3, 4)], lambda m, x: x.max()),
    case("max/dim", [distinct(3, 4, 5)], lambda m, x: x.max(1).values),
    case("max/dim-indices", [distinct(3, 4, 5)], lambda m, x: x.max(2, keepdim=True).indices),
    case("max/dim-keepdim", [distinct(3, 4, 5)], lambda m, x: x.max(-1, keepdim=True)[0]),
    case("min/all", [distinct(3, 4)], lambda m, x: x.min()),
    case("min/all-ties", [grid(3, 4)], lambda m, x: x.min()),
    case("min/dim", [distinct(3, 4)], lambda m, x: x.min(0).values),
    case("min/dim-indices", [distinct(3, 4)], lambda m, x: x.min(1)[1]),
    case("argmax/all", [distinct(3, 4)], lambda m, x: x.argmax()),
    case("argmax/dim", [distinct(3, 4, 5)], lambda m, x: x.argmax(1)),
    case("argmax/dim-keepdim", [distinct(3, 4, 5)], lambda m, x: x.argmax(-1, keepdim=True)),
    case("argmax/ties-first", [grid(4, 6)], lambda m, x: x.argmax(1)),
    case("argmin/dim", [distinct(3, 4)], lambda m, x: x.argmin(0)),
    case("var/all", [(3, 4)], lambda m, x: x.var()),
    case("var/dim-biased", [(3, 4)], lambda m, x: x.var(1, unbiased=False)),
    case("var/dim-keepdim", [(3, 4, 2)], lambda m, x: x.var((0, 2), keepdim=True)),
    case("std/dim", [(3, 4)], lambda m, x: x.std(0)),
    case("logsumexp", [(3, 4)], lambda m, x: x.logsumexp(1)),
    # ---------------------------------------------------------------- shapes
    case("reshape", [(3, 4)], lambda m, x: x.reshape(2, -1, 3)),
    case("reshape/tuple", [(2, 6)], lambda m, x: x.reshape((4, 3))),
    case("view", [(3, 4)], lambda m, x: x.view(12)),
    case("T", [(3, 4)], lambda m, x: x.T),
    case("t", [(3, 4)], lambda m, x: x.t()),
    case("permute", [(2, 3, 4)], lambda m, x: x.permute(2, 0, 1)),
    case("permute/tuple", [(2, 3, 4, 5)], lambda m, x: x.permute((1, 3, 0, 2))),
    case("transpose", [(2, 3, 4)], lambda m, x: x.transpose(0, 2)),
    case("unsqueeze", [(3, 4)], lambda m, x: x.unsqueeze(1)),
    case("unsqueeze/negative", [(3, 4)], lambda m, x: x.unsqueeze(-1)),
    case("squeeze/all", [(3, 1, 4, 1)], lambda m, x: x.squeeze()),
    case("squeeze/dim", [(3, 1, 4)], lambda m, x: x.squeeze(1)),
    case("squeeze/dim-not-one", [(3, 1, 4)], lambda m, x: x.squeeze(0)),
    case("flatten", [(2, 3, 4)], lambda m, x: x.flatten()),
    case("flatten/range", [(2, 3, 4, 5)], lambda m, x: x.flatten(1, 2)),
    case("expand", [(3, 1)], lambda m, x: x.expand(2, 3, 4)),
    case("expand/minus-one", [(1, 4)], lambda m, x: x.expand(3, -1)),
    case("contiguous", [(3, 4)], lambda m, x: x.T.contiguous()),
    case("clone", [(3, 4)], lambda m, x: x.clone() * 2),
    case("chunk", [(5, 4)], lambda m, x: x.chunk(3, 0)[2] * 2 + x.chunk(3, 0)[0][:1]),
    case("split", [(3, 7)], lambda m, x: x.split([2, 5], 1)[1] + 1.0),
    case("split/size", [(3, 7)], lambda m, x: x.split(3, 1)[2] * 3),
    case("tril", [(4, 5)], lambda m, x: x.tril()),
    case("triu/diagonal", [(2, 4, 4)], lambda m, x: x.triu(1)),
    # ---------------------------------------------------------------- indexing
    case("getitem/int", [(3, 4)], lambda m, x: x[1]),
    case("getitem/negative-int", [(3, 4)], lambda m, x: x[-1]),
    case("getitem/slice", [(5, 4)], lambda m, x: x[1:4]),
    case("getitem/step", [(7, 4)], lambda m, x: x[::2]),
    case("getitem/slices", [(4, 5, 6)], lambda m, x: x[:, 1:, ::2]),
    case("getitem/negative-slice", [(4, 5)], lambda m, x: x[:, -2:]),
    case("getitem/none", [(3, 4)], lambda m, x: x[None]),
    case("getitem/ellipsis", [(2, 3, 4)], lambda m, x: x[..., 1]),
    case("getitem/mixed", [(2, 3, 4)], lambda m, x: x[1, ..., None, 1:3]),
    case("getitem/int-slice-step", [(4, 6, 5)], lambda m, x: x[2, 1::2, :4]),
    case("getitem/index-list", [(5, 3)], lambda m, x: x[[4, 0, 4, 2]]),
    case("gather", [(3, 5), ints(5, 3, 4)], lambda m, x, i: x.gather(1, i)),
    case("gather/dim0", [(4, 3), ints(4, 2, 3)], lambda m, x, i: x.gather(0, i)),
    case("index_select", [(4, 5), ints(5, 6)], lambda m, x, i: x.index_select(1, i)),
    case("masked_fill", [(3, 4), grid(3, 4)], lambda m, x, mask: x.masked_fill(mask > 0, -1.5)),
    # ---------------------------------------------------------------- joining and selecting
    case("cat/dim0", [(2, 3), (4, 3)], lambda m, x, y: m.lib.cat([x, y], 0)),
    case("cat/dim1-three", [(2, 3), (2, 1), (2, 2)], lambda m, x, y, z: m.lib.cat([x, y, z], dim=1)),
    case("cat/negative-dim", [(2, 3, 2), (2, 3, 1)], lambda m, x, y: m.lib.cat((x, y), -1)),
    case("stack", [(2, 3), (2, 3)], lambda m, x, y: m.lib.stack([x, y])),
    case("stack/dim", [(2, 3), (2, 3), (2, 3)], lambda m, x, y, z: m.lib.stack([x, y, z], 2)),
    case("where", [grid(3, 4), (3, 4), (3, 4)], lambda m, c, x, y: m.lib.where(c > 0, x, y)),
    case("where/broadcast", [grid(3, 1), (4,), (3, 4)], lambda m, c, x, y: m.lib.where(c > 0, x, y)),
    case("where/scalar", [grid(3, 4), (3, 4)], lambda m, c, x: m.lib.where(c > 0, x, 0.0)),
    # ---------------------------------------------------------------- softmax family
    case("softmax/last", [(3, 5)], lambda m, x: x.softmax(-1)),
    case("softmax/dim0", [(3, 5)], lambda m, x: m.lib.softmax(x, 0)),
    case("softmax/middle", [(2, 3, 4)], lambda m, x: x.softmax(1)),
    case("log_softmax/last", [(3, 5)], lambda m, x: x.log_softmax(-1)),
    case("log_softmax/middle", [(2, 3, 4)], lambda m, x: m.lib.log_softmax(x, 1)),
    case("log_softmax/large", [(2, 6)], lambda m, x: (x * 100).log_softmax(1), atol=1e-3),
]


@pytest.mark.parametrize("inputs, fn, tol", TENSOR_CASES)
def test_tensor_op(inputs, fn, tol):
    check_op(inputs, lambda *a: fn(TORCH, *a), lambda *a: fn(ANYGPU, *a), **tol)


_labels = ints(7, 6)
_labels_ignored = _labels.copy()
_labels_ignored[[1, 4]] = -100
_labels_spatial = ints(4, 2, 3, 5)
_class_weight = pos(7)
_keep_mask = ints(2, 2, 1, 7)  # an int mask: attend where nonzero (torch: a bool mask)
_keep_mask[..., 0] = 1  # no fully masked row (torch and anygpu both give NaN there)

FUNCTIONAL_CASES = [
    # ---------------------------------------------------------------- linear and convolutions
    case("linear", [(5, 7), (3, 7), (3,)], lambda m, x, w, b: m.F.linear(x, w, b), atol=1e-4),
    case("linear/no-bias-3d", [(2, 5, 7), (4, 7)], lambda m, x, w: m.F.linear(x, w), atol=1e-4),
    case("linear/1d", [(7,), (3, 7), (3,)], lambda m, x, w, b: m.F.linear(x, w, b), atol=1e-4),
    case("conv2d", [(2, 3, 7, 9), (4, 3, 3, 3), (4,)], lambda m, x, w, b: m.F.conv2d(x, w, b), atol=1e-4),
    case("conv2d/stride-padding", [(2, 3, 8, 7), (5, 3, 3, 3)],
         lambda m, x, w: m.F.conv2d(x, w, stride=2, padding=1), atol=1e-4),
    case("conv2d/asymmetric", [(1, 2, 9, 8), (3, 2, 3, 2), (3,)],
         lambda m, x, w, b: m.F.conv2d(x, w, b, stride=(2, 1), padding=(1, 2)), atol=1e-4),
    case("conv2d/dilation", [(2, 2, 9, 9), (3, 2, 3, 3)], lambda m, x, w: m.F.conv2d(x, w, dilation=2, padding=1),
         atol=1e-4),
    case("conv2d/groups", [(2, 4, 6, 6), (6, 2, 3, 3), (6,)],
         lambda m, x, w, b: m.F.conv2d(x, w, b, padding=1, groups=2), atol=1e-4),
    case("conv2d/depthwise", [(1, 3, 5, 5), (3, 1, 3, 3)], lambda m, x, w: m.F.conv2d(x, w, groups=3), atol=1e-4),
    case("conv2d/1x1", [(3, 5, 4, 4), (2, 5, 1, 1)], lambda m, x, w: m.F.conv2d(x, w), atol=1e-4),
    case("conv2d/unbatched", [(3, 6, 6), (2, 3, 3, 3)], lambda m, x, w: m.F.conv2d(x, w, padding=1), atol=1e-4),
    case("conv2d/same-even-kernel", [(1, 2, 6, 5), (3, 2, 4, 2)], lambda m, x, w: m.F.conv2d(x, w, padding="same"),
         atol=1e-4),
    case("conv2d/same-dilated", [(1, 2, 6, 6), (2, 2, 3, 3)],
         lambda m, x, w: m.F.conv2d(x, w, padding="same", dilation=2), atol=1e-4),
    case("conv2d/valid", [(1, 2, 5, 6), (2, 2, 3, 3)], lambda m, x, w: m.F.conv2d(x, w, padding="valid"),
         atol=1e-4),
    case("conv_transpose2d", [(2, 3, 4, 5), (3, 2, 3, 3), (2,)],
         lambda m, x, w, b: m.F.conv_transpose2d(x, w, b), atol=1e-4),
    case("conv_transpose2d/stride-output-padding", [(2, 3, 4, 4), (3, 4, 3, 3)],
         lambda m, x, w: m.F.conv_transpose2d(x, w, stride=2, padding=1, output_padding=1), atol=1e-4),
    case("conv_transpose2d/groups", [(1, 4, 3, 5), (4, 3, 2, 3), (6,)],
         lambda m, x, w, b: m.F.conv_transpose2d(x, w, b, stride=(2, 1), groups=2), atol=1e-4),
    case("conv_transpose2d/dilation", [(1, 2, 4, 4), (2, 2, 3, 3)],
         lambda m, x, w: m.F.conv_transpose2d(x, w, stride=1, dilation=2, padding=1), atol=1e-4),
    case("conv_transpose2d/dilation-output-padding", [(1, 2, 3, 3), (2, 2, 2, 2)],
         lambda m, x, w: m.F.conv_transpose2d(x, w, dilation=2, output_padding=1), atol=1e-4),
    case("conv_transpose2d/unbatched", [(3, 4, 4), (3, 2, 2, 2)],
         lambda m, x, w: m.F.conv_transpose2d(x, w, stride=2), atol=1e-4),
    # ---------------------------------------------------------------- normalisation
    case("group_norm", [(2, 6, 5, 5), (6,), (6,)], lambda m, x, w, b: m.F.group_norm(x, 3, w, b), atol=1e-4),
    case("group_norm/no-affine-3d", [(3, 4, 7)], lambda m, x: m.F.group_norm(x, 2), atol=1e-4),
    case("group_norm/instance", [(2, 3, 4, 4), (3,), (3,)], lambda m, x, w, b: m.F.group_norm(x, 3, w, b, eps=1e-3),
         atol=1e-4),
    case("layer_norm", [(4, 7), (7,), (7,)], lambda m, x, w, b: m.F.layer_norm(x, (7,), w, b), atol=1e-4),
    case("layer_norm/multi-dim", [(2, 3, 5, 6), (5, 6), (5, 6)],
         lambda m, x, w, b: m.F.layer_norm(x, (5, 6), w, b), atol=1e-4),
    case("layer_norm/no-affine", [(3, 70)], lambda m, x: m.F.layer_norm(x, [70]), atol=1e-4),
    case("layer_norm/weight-only", [(5, 3, 9), (9,)], lambda m, x, w: m.F.layer_norm(x, (9,), w, eps=1e-3), atol=1e-4),
    case("layer_norm/bias-only", [(5, 9), (9,)], lambda m, x, b: m.F.layer_norm(x, [9], bias=b), atol=1e-4),
    case("batch_norm/train-4d", [(3, 4, 5, 5), (4,), (4,)],
         lambda m, x, w, b: m.F.batch_norm(x, None, None, w, b, training=True), atol=1e-4),
    case("batch_norm/train-2d", [(6, 5)], lambda m, x: m.F.batch_norm(x, None, None, training=True), atol=1e-4),
    case("batch_norm/eval-3d", [(2, 3, 7), pos(3) - 1, pos(3), (3,), (3,)],
         lambda m, x, mean, var, w, b: m.F.batch_norm(x, mean.detach(), var.detach(), w, b), atol=1e-4),
    # ---------------------------------------------------------------- softmax and losses
    case("softmax/F", [(3, 6)], lambda m, x: m.F.softmax(x, dim=1)),
    case("softmax/F-implicit-dim", [(2, 3, 4)], lambda m, x: m.F.softmax(x)),
    case("log_softmax/F-implicit-dim", [(2, 3)], lambda m, x: m.F.log_softmax(x)),
    case("log_softmax/F", [(3, 6)], lambda m, x: m.F.log_softmax(x, -1)),
    case("cross_entropy", [(6, 7), _labels], lambda m, x, t: m.F.cross_entropy(x, t)),
    case("cross_entropy/weight", [(6, 7), _labels, _class_weight],
         lambda m, x, t, w: m.F.cross_entropy(x, t, w.detach())),
    case("cross_entropy/ignore-index", [(6, 7), _labels_ignored], lambda m, x, t: m.F.cross_entropy(x, t)),
    case("cross_entropy/custom-ignore", [(6, 7), _labels], lambda m, x, t: m.F.cross_entropy(x, t, ignore_index=2)),
    case("cross_entropy/sum", [(6, 7), _labels_ignored],
         lambda m, x, t: m.F.cross_entropy(x, t, reduction="sum"), atol=1e-4),
    case("cross_entropy/none", [(6, 7), _labels_ignored], lambda m, x, t: m.F.cross_entropy(x, t, reduction="none")),
    case("cross_entropy/label-smoothing", [(6, 7), _labels_ignored],
         lambda m, x, t: m.F.cross_entropy(x, t, label_smoothing=0.2)),
    case("cross_entropy/label-smoothing-weight", [(6, 7), _labels_ignored, _class_weight],
         lambda m, x, t, w: m.F.cross_entropy(x, t, w.detach(), label_smoothing=0.1)),
    case("cross_entropy/label-smoothing-none", [(6, 7), _labels],
         lambda m, x, t: m.F.cross_entropy(x, t, reduction="none", label_smoothing=0.3)),
    case("cross_entropy/spatial", [(2, 4, 3, 5), _labels_spatial], lambda m, x, t: m.F.cross_entropy(x, t)),
    case("cross_entropy/one-sample", [(7,), np.array(3)], lambda m, x, t: m.F.cross_entropy(x, t)),
    case("cross_entropy/probabilities", [(4, 5), pos(4, 5)],
         lambda m, x, p: m.F.cross_entropy(x, (p / p.sum(1, keepdim=True)).detach(), label_smoothing=0.1)),
    case("cross_entropy/large-logits", [(3, 200), ints(200, 3)],
         lambda m, x, t: m.F.cross_entropy(x * 30, t), atol=1e-3, rtol=1e-4),
    case("nll_loss", [(6, 7), _labels], lambda m, x, t: m.F.nll_loss(m.F.log_softmax(x, 1), t)),
    case("nll_loss/weight-ignore", [(6, 7), _labels_ignored, _class_weight],
         lambda m, x, t, w: m.F.nll_loss(x, t, w.detach())),
    case("nll_loss/none-spatial", [(2, 4, 3, 5), _labels_spatial],
         lambda m, x, t: m.F.nll_loss(x, t, reduction="none")),
    case("nll_loss/sum", [(6, 7), _labels], lambda m, x, t: m.F.nll_loss(x, t, reduction="sum")),
    case("mse_loss", [(3, 5), (3, 5)], lambda m, x, y: m.F.mse_loss(x, y)),
    case("mse_loss/sum", [(3, 5), (3, 5)], lambda m, x, y: m.F.mse_loss(x, y, reduction="sum"), atol=1e-4),
    case("mse_loss/none", [(3, 5), (3, 5)], lambda m, x, y: m.F.mse_loss(x, y, reduction="none")),
    case("l1_loss", [(3, 5), (3, 5)], lambda m, x, y: m.F.l1_loss(x, y)),
    case("binary_cross_entropy_with_logits", [(4, 3), pos(4, 3) / 2],
         lambda m, x, t: m.F.binary_cross_entropy_with_logits(x * 5, t)),
    case("binary_cross_entropy_with_logits/pos-weight", [(4, 3), pos(4, 3) / 2, pos(3)],
         lambda m, x, t, w: m.F.binary_cross_entropy_with_logits(x, t, pos_weight=w.detach(), reduction="sum"), atol=1e-4),
    # ---------------------------------------------------------------- attention
    case("scaled_dot_product_attention", [(2, 3, 5, 8), (2, 3, 5, 8), (2, 3, 5, 8)],
         lambda m, q, k, v: m.F.scaled_dot_product_attention(q, k, v), atol=1e-4),
    case("scaled_dot_product_attention/cross-lengths", [(2, 4, 8), (2, 6, 8), (2, 6, 5)],
         lambda m, q, k, v: m.F.scaled_dot_product_attention(q, k, v, scale=0.3), atol=1e-4),
    case("scaled_dot_product_attention/causal", [(1, 2, 6, 4), (1, 2, 6, 4), (1, 2, 6, 4)],
         lambda m, q, k, v: m.F.scaled_dot_product_attention(q, k, v, is_causal=True), atol=1e-4),
    case("scaled_dot_product_attention/float-mask", [(2, 5, 4), (2, 5, 4), (2, 5, 4), (5, 5)],
         lambda m, q, k, v, mask: m.F.scaled_dot_product_attention(q, k, v, attn_mask=mask), atol=1e-4),
    case("scaled_dot_product_attention/bool-mask", [(2, 5, 4), (2, 7, 4), (2, 7, 3), _keep_mask],
         lambda m, q, k, v, mask: m.F.scaled_dot_product_attention(
             q, k, v, attn_mask=mask.bool() if m is TORCH else mask), atol=1e-4),
    case("scaled_dot_product_attention/broadcast-batch", [(2, 3, 4, 8), (1, 3, 5, 8), (2, 1, 5, 8)],
         lambda m, q, k, v: m.F.scaled_dot_product_attention(q, k, v), atol=1e-4),
    # ---------------------------------------------------------------- resampling and pooling
    case("interpolate/scale-2", [(2, 3, 4, 5)], lambda m, x: m.F.interpolate(x, scale_factor=2)),
    case("interpolate/size-blocks", [(1, 2, 3, 4)], lambda m, x: m.F.interpolate(x, size=(9, 8))),
    case("interpolate/size-odd", [(2, 2, 3, 4)], lambda m, x: m.F.interpolate(x, size=(7, 5))),
    case("interpolate/downsample", [(1, 3, 8, 6)], lambda m, x: m.F.interpolate(x, scale_factor=0.5)),
    case("interpolate/fractional-scale", [(1, 1, 5, 7)], lambda m, x: m.F.interpolate(x, scale_factor=1.7)),
    case("interpolate/1d", [(2, 3, 5)], lambda m, x: m.F.interpolate(x, scale_factor=3)),
    case("interpolate/3d", [(1, 2, 2, 3, 2)], lambda m, x: m.F.interpolate(x, size=(4, 3, 5))),
    case("interpolate/nearest-exact", [(1, 2, 5, 4)], lambda m, x: m.F.interpolate(x, size=(3, 7),
                                                                                   mode="nearest-exact")),
    case("interpolate/bilinear-up", [(2, 3, 4, 5)], lambda m, x: m.F.interpolate(x, scale_factor=2, mode="bilinear")),
    case("interpolate/bilinear-corners", [(2, 2, 4, 5)], lambda m, x: m.F.interpolate(x, size=(7, 9), mode="bilinear",
                                                                                      align_corners=True)),
    case("interpolate/bilinear-down", [(1, 3, 9, 7)], lambda m, x: m.F.interpolate(x, scale_factor=0.6, mode="bilinear")),
    case("interpolate/bilinear-fractional", [(1, 2, 5, 6)],
         lambda m, x: m.F.interpolate(x, scale_factor=1.7, mode="bilinear", recompute_scale_factor=True)),
    case("interpolate/bilinear-to-1", [(1, 2, 5, 6)], lambda m, x: m.F.interpolate(x, size=(1, 3), mode="bilinear")),
    case("interpolate/linear", [(2, 3, 7)], lambda m, x: m.F.interpolate(x, size=11, mode="linear")),
    case("interpolate/linear-corners", [(2, 3, 7)], lambda m, x: m.F.interpolate(x, scale_factor=1.5, mode="linear",
                                                                                align_corners=True)),
    case("interpolate/trilinear", [(1, 2, 3, 4, 5)], lambda m, x: m.F.interpolate(x, size=(5, 3, 6), mode="trilinear")),
    case("max_pool2d", [distinct(2, 3, 6, 6)], lambda m, x: m.F.max_pool2d(x, 2)),
    case("max_pool2d/stride-padding", [distinct(2, 2, 7, 7)], lambda m, x: m.F.max_pool2d(x, 3, 2, 1)),
    case("max_pool2d/overlap", [grid(1, 2, 6, 5)], lambda m, x: m.F.max_pool2d(x, 3, stride=1)),
    case("max_pool2d/dilation", [distinct(1, 2, 9, 9)], lambda m, x: m.F.max_pool2d(x, 2, 2, dilation=2)),
    case("max_pool2d/ceil-mode", [distinct(1, 2, 7, 6)], lambda m, x: m.F.max_pool2d(x, 2, ceil_mode=True)),
    case("max_pool2d/rect", [distinct(2, 1, 7, 8)], lambda m, x: m.F.max_pool2d(x, (3, 2), (2, 3), (1, 0))),
    case("max_pool2d/indices", [distinct(1, 2, 6, 6)], lambda m, x: m.F.max_pool2d(x, 3, 2, 1,
                                                                                    return_indices=True)[1]),
    case("max_pool2d/unbatched", [distinct(3, 4, 6)], lambda m, x: m.F.max_pool2d(x, 2)),
    case("avg_pool2d", [(2, 3, 6, 6)], lambda m, x: m.F.avg_pool2d(x, 2)),
    case("avg_pool2d/stride-padding", [(2, 2, 7, 7)], lambda m, x: m.F.avg_pool2d(x, 3, 2, 1)),
    case("avg_pool2d/exclude-pad", [(1, 2, 7, 5)],
         lambda m, x: m.F.avg_pool2d(x, 3, 2, 1, count_include_pad=False)),
    case("avg_pool2d/ceil-mode", [(1, 2, 7, 6)], lambda m, x: m.F.avg_pool2d(x, 2, ceil_mode=True)),
    case("avg_pool2d/ceil-exclude-pad", [(1, 1, 8, 7)],
         lambda m, x: m.F.avg_pool2d(x, 3, 2, 1, ceil_mode=True, count_include_pad=False)),
    case("avg_pool2d/divisor-override", [(1, 2, 6, 6)], lambda m, x: m.F.avg_pool2d(x, 3, 1, divisor_override=4)),
    case("avg_pool2d/unbatched", [(3, 5, 4)], lambda m, x: m.F.avg_pool2d(x, (2, 1))),
    case("adaptive_avg_pool2d", [(2, 3, 6, 4)], lambda m, x: m.F.adaptive_avg_pool2d(x, 1)),
    case("adaptive_avg_pool2d/blocks", [(2, 3, 6, 4)], lambda m, x: m.F.adaptive_avg_pool2d(x, (3, 2))),
    case("pad", [(2, 3, 4)], lambda m, x: m.F.pad(x, (1, 2))),
    case("pad/two-dims-value", [(2, 3, 4)], lambda m, x: m.F.pad(x, (0, 1, 2, 1), value=0.5)),
    case("pad/crop", [(2, 5, 4)], lambda m, x: m.F.pad(x, (-1, 2, 1, -2))),
    # ---------------------------------------------------------------- activations
    case("relu/F", [(3, 5)], lambda m, x: m.F.relu(x)),
    case("silu", [(3, 5)], lambda m, x: m.F.silu(x)),
    case("gelu", [(3, 5)], lambda m, x: m.F.gelu(x)),
    case("gelu/vec4", [(4, 6)], lambda m, x: m.F.gelu(x)),  # n % 4 == 0: the vec4 kernels
    case("gelu/tanh", [(4, 5)], lambda m, x: m.F.gelu(x * 2, approximate="tanh")),
    case("sigmoid/F", [(3, 5)], lambda m, x: m.F.sigmoid(x * 3)),
    case("tanh/F", [(3, 5)], lambda m, x: m.F.tanh(x * 3)),
    case("leaky_relu", [(3, 5)], lambda m, x: m.F.leaky_relu(x, 0.2)),
    case("elu", [(3, 5)], lambda m, x: m.F.elu(x, alpha=0.7)),
    case("softplus", [(4, 5)], lambda m, x: m.F.softplus(x * 4, beta=2.0, threshold=5.0)),
    case("normalize", [(3, 5)], lambda m, x: m.F.normalize(x, dim=1)),
    case("normalize/p1", [(3, 5)], lambda m, x: m.F.normalize(x, p=1, dim=0)),
    # ---------------------------------------------------------------- dropout and embeddings
    case("dropout/p0", [(3, 5)], lambda m, x: m.F.dropout(x, 0.0)),
    case("dropout/eval", [(3, 5)], lambda m, x: m.F.dropout(x, 0.5, training=False)),
    case("embedding", [ints(7, 2, 5), (7, 4)], lambda m, i, w: m.F.embedding(i, w)),
    case("embedding/repeats", [np.array([1, 1, 1, 3, 1]), (5, 3)], lambda m, i, w: m.F.embedding(i, w)),
    case("embedding/padding-idx", [ints(6, 3, 4), (6, 3)], lambda m, i, w: m.F.embedding(i, w, padding_idx=2)),
    case("one_hot", [ints(5, 2, 3)], lambda m, i: m.F.one_hot(i, 6)),
]


@pytest.mark.parametrize("inputs, fn, tol", FUNCTIONAL_CASES)
def test_functional(inputs, fn, tol):
    check_op(inputs, lambda *a: fn(TORCH, *a), lambda *a: fn(ANYGPU, *a), **tol)


def covered_ops() -> set[str]:
    """The distinct ops checked against torch by the two tables above."""
    return {p.id.split("/")[0] for p in TENSOR_CASES + FUNCTIONAL_CASES}


def test_oracle_covers_every_required_op():
    required = {"add", "sub", "mul", "div", "pow", "matmul", "eq", "ne", "lt", "le", "gt", "ge", "sum", "mean",
                "max", "min", "argmax", "exp", "log", "sqrt", "abs", "clamp", "reshape", "view", "T", "permute",
                "transpose", "unsqueeze", "squeeze", "flatten", "getitem", "cat", "stack", "where", "softmax",
                "log_softmax", "linear", "conv2d", "conv_transpose2d", "group_norm", "layer_norm", "batch_norm",
                "cross_entropy", "nll_loss", "mse_loss", "scaled_dot_product_attention", "interpolate", "relu",
                "silu", "gelu", "sigmoid", "tanh", "max_pool2d", "avg_pool2d", "dropout", "embedding"}
    assert required <= covered_ops(), required - covered_ops()


# ===================================================================== autograd semantics

def test_detach_cuts_the_graph():
    x = ag.tensor([1.0, 2.0, 3.0], requires_grad=True)
    y = x * 2
    d = y.detach()
    assert not d.requires_grad and d.grad_fn is None
    np.testing.assert_array_equal(d.numpy(), [2.0, 4.0, 6.0])
    (y * d).sum().backward()  # d is a constant: d(y*d)/dx = 2*d
    np.testing.assert_allclose(x.grad.numpy(), [4.0, 8.0, 12.0])


def test_no_grad_records_nothing():
    x = ag.tensor([1.0, -2.0], requires_grad=True)
    with ag.no_grad():
        y = (x * 3).relu().sum()
    assert not y.requires_grad and y.grad_fn is None
    with pytest.raises(RuntimeError, match="does not require grad"):
        y.backward()

    @ag.no_grad()
    def doubled(t):
        return t * 2

    assert not doubled(x).requires_grad
    assert (x * 2).requires_grad  # the decorator restored grad mode


def test_grad_accumulates_over_two_backward_calls():
    x_t = torch.tensor([0.5, -1.0, 2.0], requires_grad=True)
    x = ag.tensor(x_t.detach().numpy(), requires_grad=True)
    for lib_x in (x_t, x):
        (lib_x * lib_x).sum().backward()
        (lib_x.exp() * 3).sum().backward()
    np.testing.assert_allclose(x.grad.numpy(), x_t.grad.numpy(), rtol=1e-5)


def test_backward_with_a_gradient_argument():
    w = np.array([[1.0, -2.0, 0.5], [0.0, 3.0, 1.0]], np.float32)
    x_t = torch.tensor(w * 0.3, requires_grad=True)
    x = ag.tensor(w * 0.3, requires_grad=True)
    x_t.sigmoid().backward(torch.tensor(w))
    x.sigmoid().backward(ag.tensor(w))
    np.testing.assert_allclose(x.grad.numpy(), x_t.grad.numpy(), rtol=1e-5, atol=1e-6)
    with pytest.raises(RuntimeError, match="scalar outputs"):
        (x * 2).backward()
    with pytest.raises(ValueError, match=r"gradient has shape \(3,\), expected \(2, 3\)"):
        (x * 2).backward(ag.ones(3))


def test_reused_tensor_sums_its_gradients():
    check_op([(4,)], lambda x: x * x.sigmoid() + x.exp() - x)


def test_item_numpy_repr_and_shapes():
    x = ag.tensor([[1.5, -2.0], [3.0, 4.25]])
    assert x.shape == (2, 2) and x.ndim == 2 and x.numel() == 4 and x.size(1) == 2 and len(x) == 2
    assert x.sum().item() == pytest.approx(6.75) and isinstance(x.sum().item(), float)
    assert x.argmax().item() == 3 and isinstance(x.argmax().item(), int)
    arr = x.numpy()
    assert arr.dtype == np.float32 and arr.shape == (2, 2)
    arr[0, 0] = 99.0  # a copy: the tensor is unchanged
    assert x.numpy()[0, 0] == 1.5
    assert ag.tensor(2.0).shape == () and ag.tensor(2.0).item() == 2.0
    text = repr(x)
    assert text.startswith("tensor(") and "4.25" in text
    assert "grad_fn=<" in repr(ag.tensor([1.0], requires_grad=True) * 2)
    assert repr(ag.tensor([1, 2])) == repr(torch.tensor([1, 2]))  # int64 is a default dtype: not shown
    assert repr(ag.tensor([1, 2], dtype=ag.int32)) == repr(torch.tensor([1, 2], dtype=torch.int32))
    with pytest.raises(ValueError, match=r"only one-element tensors.*\(2, 2\)"):
        x.item()


def test_batch_norm_updates_running_stats_like_torch():
    x = np.random.default_rng(3).normal(1.0, 2.0, size=(4, 3, 5, 5)).astype(np.float32)
    mean_t, var_t = torch.zeros(3), torch.ones(3)
    mean, var = ag.zeros(3), ag.ones(3)
    for _ in range(2):
        TF.batch_norm(torch.tensor(x), mean_t, var_t, training=True, momentum=0.3)
        F.batch_norm(ag.tensor(x), mean, var, training=True, momentum=0.3)
    np.testing.assert_allclose(mean.numpy(), mean_t.numpy(), rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(var.numpy(), var_t.numpy(), rtol=1e-5, atol=1e-6)
    out = F.batch_norm(ag.tensor(x), mean, var, training=False)  # now uses the running stats
    ref = TF.batch_norm(torch.tensor(x), mean_t, var_t, training=False)
    np.testing.assert_allclose(out.numpy(), ref.numpy(), rtol=1e-4, atol=1e-5)


def test_dropout_mask_is_seeded_scaled_and_shared_with_backward():
    x = ag.ones(40, 50, requires_grad=True)
    ag.manual_seed(5)
    y = F.dropout(x, p=0.3)
    values = y.numpy()
    kept = values != 0
    assert 0.25 < 1 - kept.mean() < 0.35  # about p of the elements dropped
    np.testing.assert_allclose(values[kept], 1 / 0.7, rtol=1e-6)  # the rest scaled by 1/(1-p)
    y.sum().backward()
    np.testing.assert_array_equal(x.grad.numpy() != 0, kept)  # the same mask routes the gradient
    ag.manual_seed(5)
    np.testing.assert_array_equal(F.dropout(x, p=0.3).numpy(), values)  # same seed, same mask
    assert not np.array_equal(F.dropout(x, p=0.3).numpy(), values)  # the next draw differs
    np.testing.assert_array_equal(F.dropout(x, p=1.0).numpy(), 0.0)


def test_scaled_dot_product_attention_dropout_matches_torch_with_the_same_mask():
    # With value = I the output is the dropped, rescaled probability matrix itself, which
    # exposes the mask; torch then replays the computation with that mask.
    rng = np.random.default_rng(2)
    q_np, k_np = (rng.normal(size=(2, 5, 3)).astype(np.float32) for _ in range(2))
    g_np = rng.normal(size=(2, 5, 5)).astype(np.float32)
    q, k = ag.tensor(q_np, requires_grad=True), ag.tensor(k_np, requires_grad=True)
    v = ag.tensor(np.broadcast_to(np.eye(5, dtype=np.float32), (2, 5, 5)), requires_grad=True)
    ag.manual_seed(11)
    out = F.scaled_dot_product_attention(q, k, v, dropout_p=0.4)
    out.backward(ag.tensor(g_np))
    kept = out.numpy() != 0
    assert 0.2 < 1 - kept.mean() < 0.6
    q_t, k_t = torch.tensor(q_np, requires_grad=True), torch.tensor(k_np, requires_grad=True)
    v_t = torch.eye(5).expand(2, 5, 5).clone().requires_grad_(True)
    probs = (q_t @ k_t.transpose(1, 2) / np.sqrt(3)).softmax(-1)
    out_t = (probs * torch.tensor(kept) / 0.6) @ v_t
    out_t.backward(torch.tensor(g_np))
    np.testing.assert_allclose(out.numpy(), out_t.detach().numpy(), rtol=1e-4, atol=1e-5)
    for mine, ref in ((q, q_t), (k, k_t), (v, v_t)):
        np.testing.assert_allclose(mine.grad.numpy(), ref.grad.numpy(), rtol=1e-4, atol=1e-5)


def test_cross_entropy_target_on_gpu_only_gives_nan_for_bad_class():
    logits = ag.randn(3, 4)
    target = ag.tensor([0, 1, 2]) + 5  # computed on the GPU: no host copy to check
    target = target.long()
    assert target._host is None
    assert np.isnan(F.cross_entropy(logits, target).item())


def test_interpolate_and_pool_keep_gradients_flowing_into_modules():
    x = ag.randn(1, 2, 4, 4, requires_grad=True)
    y = F.max_pool2d(F.interpolate(x, scale_factor=2), 2)  # exact inverse: every max is its source
    np.testing.assert_allclose(y.numpy(), x.numpy())
    y.sum().backward()
    np.testing.assert_allclose(x.grad.numpy(), 1.0)


def test_views_see_in_place_updates_of_their_buffer():
    p = ag.tensor([1.0, 2.0, 3.0, 4.0])
    detached, reshaped = p.detach(), p.reshape(2, 2)
    p.zero_()  # an in-place write (as optimizers and running statistics do)
    np.testing.assert_array_equal(detached.numpy(), 0.0)
    np.testing.assert_array_equal(reshaped.numpy(), 0.0)
