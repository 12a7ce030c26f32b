"""Bad input to Tensor ops and nn.functional: a clear exception naming the op and the
shapes, raised before any GPU work, and the device still computes correctly afterwards."""

import numpy as np
import pytest

import anygpu as ag
import anygpu.nn.functional as F


def error(name, make, exc, pattern):
    return pytest.param(make, exc, pattern, id=name)


CASES = [
    # ---------------------------------------------------------------- broadcasting and shapes
    error("add/not-broadcastable", lambda: ag.ones(3, 4) + ag.ones(2, 4), ValueError,
          r"add: shapes \(3, 4\) and \(2, 4\) cannot be broadcast"),
    error("mul/not-broadcastable", lambda: ag.ones(2, 3, 4) * ag.ones(3, 1, 5), ValueError,
          r"mul: shapes \(2, 3, 4\) and \(3, 1, 5\) cannot be broadcast"),
    error("where/not-broadcastable", lambda: ag.where(ag.ones(3), ag.ones(4), 0.0), ValueError,
          r"where: shapes \(3,\) and \(4,\)"),
    error("compare/not-broadcastable", lambda: ag.ones(3) < ag.ones(2), ValueError, r"\(3,\) and \(2,\)"),
    error("matmul/inner-size", lambda: ag.ones(3, 4) @ ag.ones(5, 2), ValueError,
          r"matmul: shapes \(3, 4\) and \(5, 2\) cannot be multiplied \(4 != 5\)"),
    error("matmul/batched-inner-size", lambda: ag.ones(2, 3, 4) @ ag.ones(2, 3, 4), ValueError,
          r"matmul: shapes \(2, 3, 4\) and \(2, 3, 4\)"),
    error("matmul/batch-not-broadcastable", lambda: ag.ones(2, 3, 4) @ ag.ones(3, 4, 5), ValueError,
          r"matmul: shapes \(2,\) and \(3,\) cannot be broadcast"),
    error("reshape/impossible", lambda: ag.ones(3, 4).reshape(5, 3), ValueError,
          r"reshape: shape \(5, 3\) is invalid for input of size 12 \(shape \(3, 4\)\)"),
    error("reshape/impossible-inferred", lambda: ag.ones(3, 4).reshape(5, -1), ValueError,
          r"reshape: shape \(5, -1\) is invalid for input of size 12"),
    error("reshape/two-inferred", lambda: ag.ones(3, 4).view(-1, -1), ValueError, "only one dimension can be -1"),
    error("expand/incompatible", lambda: ag.ones(3, 2).expand(3, 4), ValueError,
          r"expand: cannot expand shape \(3, 2\) to \(3, 4\)"),
    error("permute/not-a-permutation", lambda: ag.ones(2, 3).permute(0, 0), ValueError, "not a permutation"),
    error("cat/mismatch", lambda: ag.cat([ag.ones(2, 3), ag.ones(2, 4)], 0), ValueError,
          r"cat: shapes \(2, 3\) and \(2, 4\) differ outside dim 0"),
    error("stack/mismatch", lambda: ag.stack([ag.ones(2, 3), ag.ones(3, 2)]), ValueError,
          r"stack: .*\(2, 3\) and \(3, 2\)"),
    error("getitem/out-of-range", lambda: ag.ones(3, 4)[3], IndexError,
          "index 3 is out of bounds for dimension 0 with size 3"),
    error("getitem/too-many", lambda: ag.ones(3)[0, 1], IndexError, "too many indices"),
    error("getitem/index-tensor-out-of-range", lambda: ag.ones(3, 2)[[0, 5]], IndexError,
          "index_select: index 5 is out of bounds for dimension 0 with size 3"),
    error("gather/rank", lambda: ag.ones(3, 4).gather(1, ag.tensor([0, 1])), ValueError,
          r"gather: index has 1 dims \(shape \(2,\)\), expected 2"),
    error("gather/out-of-range", lambda: ag.ones(3, 4).gather(1, ag.tensor([[4], [0], [1]])), IndexError,
          "gather: index 4 is out of bounds for dimension 1 with size 4"),
    error("dim/out-of-range", lambda: ag.ones(3, 4).sum(2), IndexError, "dimension 2 out of range"),
    error("item/many", lambda: ag.ones(2).item(), ValueError, r"only one-element tensors.*\(2,\)"),
    error("backward/shape", lambda: (ag.ones(2, requires_grad=True) * 2).backward(ag.ones(3)), ValueError,
          r"gradient has shape \(3,\), expected \(2,\)"),
    # ---------------------------------------------------------------- linear and convolutions
    error("linear/in-features", lambda: F.linear(ag.ones(5, 6), ag.ones(3, 7)), ValueError,
          r"linear: input has 6 features .*\(5, 6\).*weight of shape \(3, 7\) expects in_features = 7"),
    error("linear/bias", lambda: F.linear(ag.ones(5, 7), ag.ones(3, 7), ag.ones(4)), ValueError,
          r"linear: bias has shape \(4,\), expected \(3,\)"),
    error("linear/weight-rank", lambda: F.linear(ag.ones(5, 7), ag.ones(7)), ValueError,
          r"linear: weight must be 2-D, got shape \(7,\)"),
    error("conv2d/channels", lambda: F.conv2d(ag.ones(1, 3, 5, 5), ag.ones(4, 2, 3, 3)), ValueError,
          r"conv2d: input has 3 channels \(shape \(1, 3, 5, 5\)\), but weight of shape \(4, 2, 3, 3\) "
          r"with groups=1 expects 2"),
    error("conv2d/groups-channels", lambda: F.conv2d(ag.ones(1, 6, 5, 5), ag.ones(4, 3, 3, 3), groups=3),
          ValueError, r"conv2d: input has 6 channels .* with groups=3 expects 9"),
    error("conv2d/groups-out-channels", lambda: F.conv2d(ag.ones(1, 4, 5, 5), ag.ones(3, 2, 3, 3), groups=2),
          ValueError, r"conv2d: weight has 3 output channels \(shape \(3, 2, 3, 3\)\), not divisible by groups=2"),
    error("conv2d/too-small", lambda: F.conv2d(ag.ones(1, 1, 2, 2), ag.ones(1, 1, 3, 3)), ValueError,
          r"conv2d: input of spatial size \(2, 2\).*too small for a 3x3 kernel"),
    error("conv2d/input-rank", lambda: F.conv2d(ag.ones(5, 5), ag.ones(1, 1, 3, 3)), ValueError,
          r"conv2d: expected a 3-D or 4-D input .* got shape \(5, 5\)"),
    error("conv2d/bias", lambda: F.conv2d(ag.ones(1, 2, 5, 5), ag.ones(4, 2, 3, 3), ag.ones(3)), ValueError,
          r"conv2d: bias has shape \(3,\), expected \(4,\)"),
    error("conv2d/same-strided", lambda: F.conv2d(ag.ones(1, 1, 5, 5), ag.ones(1, 1, 3, 3), stride=2,
                                                  padding="same"), ValueError, "padding='same'"),
    error("conv_transpose2d/channels", lambda: F.conv_transpose2d(ag.ones(1, 3, 4, 4), ag.ones(2, 2, 3, 3)),
          ValueError, r"conv_transpose2d: input has 3 channels .*weight of shape \(2, 2, 3, 3\) expects "
                      r"weight.shape\[0\] = 2"),
    error("conv_transpose2d/groups", lambda: F.conv_transpose2d(ag.ones(1, 3, 4, 4), ag.ones(3, 2, 3, 3), groups=2),
          ValueError, "input channels 3 are not divisible by groups=2"),
    # ---------------------------------------------------------------- normalisation
    error("group_norm/groups", lambda: F.group_norm(ag.ones(2, 6, 3, 3), 4), ValueError,
          r"group_norm: input has 6 channels \(shape \(2, 6, 3, 3\)\), not divisible by num_groups=4"),
    error("group_norm/weight", lambda: F.group_norm(ag.ones(2, 6, 3), 3, ag.ones(3)), ValueError,
          r"group_norm: weight has shape \(3,\), expected \(6,\)"),
    error("layer_norm/shape", lambda: F.layer_norm(ag.ones(2, 5), (4,)), ValueError,
          r"layer_norm: input of shape \(2, 5\) does not end with normalized_shape \(4,\)"),
    error("batch_norm/stats", lambda: F.batch_norm(ag.ones(2, 3, 4), ag.zeros(4), ag.ones(4)), ValueError,
          r"batch_norm: running_mean has shape \(4,\), expected \(3,\)"),
    error("batch_norm/one-value", lambda: F.batch_norm(ag.ones(1, 3), None, None, training=True), ValueError,
          r"more than 1 value per channel .*\(1, 3\)"),
    # ---------------------------------------------------------------- losses
    error("cross_entropy/class-out-of-range", lambda: F.cross_entropy(ag.ones(3, 4), ag.tensor([0, 4, 1])),
          ValueError, r"cross_entropy: target class index 4 is out of range for 4 classes"),
    error("cross_entropy/negative-class", lambda: F.cross_entropy(ag.ones(3, 4), ag.tensor([0, -1, 1])),
          ValueError, r"cross_entropy: target class index -1 is out of range for 4 classes"),
    error("cross_entropy/spatial-class", lambda: F.cross_entropy(ag.ones(1, 3, 2, 2), ag.tensor([[[0, 1], [3, 2]]])),
          ValueError, r"target class index 3 is out of range for 3 classes"),
    error("cross_entropy/target-shape", lambda: F.cross_entropy(ag.ones(3, 4), ag.tensor([0, 1])), ValueError,
          r"cross_entropy: target has shape \(2,\), expected \(3,\) for input of shape \(3, 4\)"),
    error("cross_entropy/float-target-shape", lambda: F.cross_entropy(ag.ones(3, 4), ag.ones(3)), ValueError,
          r"cross_entropy: float target .* has shape \(3,\), expected the input's shape \(3, 4\)"),
    error("cross_entropy/weight", lambda: F.cross_entropy(ag.ones(3, 4), ag.tensor([0, 1, 2]), ag.ones(3)),
          ValueError, r"cross_entropy: weight has shape \(3,\), expected \(4,\)"),
    error("cross_entropy/reduction", lambda: F.cross_entropy(ag.ones(3, 4), ag.tensor([0, 1, 2]), reduction="avg"),
          ValueError, "reduction must be one of"),
    error("nll_loss/class-out-of-range", lambda: F.nll_loss(ag.ones(2, 3), ag.tensor([1, 7])), ValueError,
          r"nll_loss: target class index 7 is out of range for 3 classes"),
    error("mse_loss/not-broadcastable", lambda: F.mse_loss(ag.ones(3, 4), ag.ones(4, 3)), ValueError,
          r"mse_loss: shapes \(3, 4\) and \(4, 3\) cannot be broadcast"),
    # ---------------------------------------------------------------- attention, pooling, embeddings
    error("sdpa/embed", lambda: F.scaled_dot_product_attention(ag.ones(2, 4, 8), ag.ones(2, 4, 6), ag.ones(2, 4, 8)),
          ValueError, r"query of shape \(2, 4, 8\) and key of shape \(2, 4, 6\) differ in the embedding dim"),
    error("sdpa/sequence", lambda: F.scaled_dot_product_attention(ag.ones(2, 4, 8), ag.ones(2, 5, 8), ag.ones(2, 4, 8)),
          ValueError, r"key of shape \(2, 5, 8\) and value of shape \(2, 4, 8\) differ in the sequence dim"),
    error("sdpa/mask", lambda: F.scaled_dot_product_attention(ag.ones(2, 4, 8), ag.ones(2, 4, 8), ag.ones(2, 4, 8),
                                                              attn_mask=ag.ones(4, 5)),
          ValueError, r"shapes \(2, 4, 4\) and \(4, 5\) cannot be broadcast"),
    error("max_pool2d/too-small", lambda: F.max_pool2d(ag.ones(1, 1, 2, 2), 3), ValueError,
          r"max_pool2d: input of size \(2, 2\) is too small for kernel_size \(3, 3\)"),
    error("max_pool2d/padding", lambda: F.max_pool2d(ag.ones(1, 1, 6, 6), 2, padding=2), ValueError,
          r"padding \(2, 2\) must be at most half of kernel_size \(2, 2\)"),
    error("avg_pool2d/rank", lambda: F.avg_pool2d(ag.ones(6, 6), 2), ValueError, r"got shape \(6, 6\)"),
    error("embedding/index", lambda: F.embedding(ag.tensor([0, 5]), ag.ones(5, 3)), ValueError,
          r"embedding: index 5 is out of range for 5 embeddings \(weight of shape \(5, 3\)\)"),
    error("embedding/float-index", lambda: F.embedding(ag.ones(2), ag.ones(5, 3)), ValueError,
          "embedding: input must be an integer tensor"),
    error("interpolate/size-and-scale", lambda: F.interpolate(ag.ones(1, 1, 2, 2), size=4, scale_factor=2),
          ValueError, "exactly one of size and scale_factor"),
    error("interpolate/mode", lambda: F.interpolate(ag.ones(1, 1, 2, 2), scale_factor=2, mode="bicubic"),
          ValueError, "mode 'bicubic' is not supported"),
    error("dropout/p", lambda: F.dropout(ag.ones(3), p=1.5), ValueError, r"dropout: p must be in \[0, 1\]"),
    error("functional/not-a-tensor", lambda: F.relu(np.ones(3)), TypeError, "relu: input must be a Tensor"),
]


@pytest.mark.parametrize("make, exc, pattern", CASES)
def test_error_is_clear_and_the_device_still_works(make, exc, pattern):
    dispatches = ag.gpu().stats["dispatches"]
    with pytest.raises(exc, match=pattern):
        make()
    assert ag.gpu().stats["dispatches"] - dispatches <= 8  # no real work launched (only operand setup)
    x = ag.tensor([[1.0, 2.0], [3.0, 4.0]], requires_grad=True)
    loss = F.cross_entropy(x @ x, ag.tensor([1, 0]))
    loss.backward()
    expected = -np.log(np.exp([10.0, 15.0]) / np.exp([[7.0, 10.0], [15.0, 22.0]]).sum(1)).mean()
    assert loss.item() == pytest.approx(expected, rel=1e-5)
    assert x.grad.shape == (2, 2) and np.isfinite(x.grad.numpy()).all()
