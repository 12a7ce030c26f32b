"""The one table of backward rules (autograd/rules.py)."""

import numpy as np
import pytest
import torch

import anygpu as ag
from anygpu.autograd import rules
from anygpu.ops import elementwise

# Forward expressions that are gradients (or masks) themselves, not differentiable ops.
# signbit: a mask (Tensor.signbit is bool); frexp's parts: Tensor.frexp is not differentiable
NOT_OPS = {"inside", "fill", "softplus_grad", "signbit", "frexp_mantissa", "frexp_exponent"}


def test_every_float_unary_op_has_a_rule():
    missing = sorted(set(elementwise.UNARY) - NOT_OPS - set(rules.UNARY_RULES))
    assert not missing, f"unary ops without a backward rule: {missing}"
    for name in ("add", "sub", "mul", "div", "pow", "maximum", "minimum", "matmul", "conv2d", "linear"):
        assert rules.has_rule(name)


def test_a_rule_is_registered_once():
    with pytest.raises(ValueError, match="already has a backward rule"):
        rules.rule("mul")(lambda dev, g: (g,))


def test_log1p_the_worked_example_matches_torch_near_zero():
    """docs/ARCHITECTURE.md adds log1p as the worked example: a forward, a rule, this case."""
    x = np.concatenate([np.geomspace(1e-7, 10, 61), -np.geomspace(1e-7, 0.9, 61), [0.0]]).astype(np.float32)
    t = ag.tensor(x, requires_grad=True)
    t.log1p().sum().backward()
    want = torch.tensor(x, requires_grad=True)
    want.log1p().sum().backward()
    np.testing.assert_allclose(t.detach().log1p().numpy(), want.detach().log1p().numpy(), rtol=2e-6, atol=0)
    np.testing.assert_allclose(t.grad.numpy(), want.grad.numpy(), rtol=2e-6)
