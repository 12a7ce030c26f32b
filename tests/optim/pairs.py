"""The same parameters and gradients on both sides (anygpu, torch), and the step-by-step comparison."""

import numpy as np
import torch

import anygpu as ag
from anygpu import nn


def pair_params(rng, shapes):
    arrays = [rng.standard_normal(s).astype(np.float32) for s in shapes]
    return [nn.Parameter(ag.tensor(a)) for a in arrays], [torch.tensor(a, requires_grad=True) for a in arrays]


def set_grads(rng, ours, theirs):
    for p, tp in zip(ours, theirs):
        g = rng.standard_normal(p.shape).astype(np.float32)
        p.grad = ag.tensor(g)
        tp.grad = torch.tensor(g)


def assert_params_close(ours, theirs, step, rtol, atol):
    for i, (p, tp) in enumerate(zip(ours, theirs)):
        np.testing.assert_allclose(p.numpy(), tp.detach().numpy(), rtol=rtol, atol=atol,
                                   err_msg=f"parameter {i} after step {step}")
