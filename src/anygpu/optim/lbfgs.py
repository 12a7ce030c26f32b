"""L-BFGS with torch.optim.LBFGS's algorithm, arguments and state (line_search_fn=None).

The flattened gradient, the search direction and the curvature history stay on the GPU
as 1-D tensors; the scalars of the two-loop recursion (dot products) are read back, one
per product, and kept in float32 (float64 for float64 parameters) as torch keeps them in
0-d tensors of the parameters' dtype, so the iterates follow torch's. line_search_fn='strong_wolfe' is not supported (it raises).
"""

from __future__ import annotations

import numpy as np

from ..dtypes import float64
from ..tensor import Tensor, cat, enable_grad, no_grad, zeros
from .optimizers import Optimizer, _check_hyper

__all__ = ["LBFGS"]


def _dot_of(a: Tensor, b: Tensor, scalar=np.float32):
    return scalar((a * b).sum().item())


class LBFGS(Optimizer):
    """L-BFGS (torch.optim.LBFGS). `step(closure)` runs up to max_iter iterations; the
    closure clears the gradients, computes the loss, calls backward and returns the loss.
    One parameter group only, as torch."""

    def __init__(self, params, lr: float = 1, max_iter: int = 20, max_eval: int | None = None,
                 tolerance_grad: float = 1e-7, tolerance_change: float = 1e-9, history_size: int = 100,
                 line_search_fn: str | None = None):
        _check_hyper("learning rate", lr)
        if line_search_fn is not None:
            raise ValueError(f"LBFGS: line_search_fn={line_search_fn!r} is not supported (only None)")
        if max_eval is None:
            max_eval = max_iter * 5 // 4
        super().__init__(params, dict(lr=lr, max_iter=max_iter, max_eval=max_eval, tolerance_grad=tolerance_grad,
                                      tolerance_change=tolerance_change, history_size=history_size,
                                      line_search_fn=line_search_fn))
        if len(self.param_groups) != 1:
            raise ValueError("LBFGS doesn't support per-parameter options (parameter groups)")
        self._params = self.param_groups[0]["params"]
        # torch's scalars are 0-d tensors of the parameters' dtype
        self._scalar = np.float64 if all(p.dtype is float64 for p in self._params) else np.float32

    def _gather_flat_grad(self) -> Tensor:
        return cat([p.grad.detach().reshape(-1) if p.grad is not None else zeros(p.numel(), dtype=p.dtype)
                    for p in self._params])

    def _add_grad(self, step_size, update: Tensor) -> None:
        offset = 0
        for p in self._params:
            n = p.numel()
            moved = p.detach() + update[offset:offset + n].reshape(*p.shape) * float(step_size)
            p._dev.copy(moved._buf, p._buf)
            p._host = None
            offset += n

    def step(self, closure):
        """One optimisation step of up to max_iter L-BFGS iterations; returns the closure's
        first loss."""
        if closure is None:
            raise ValueError("LBFGS.step needs a closure that reevaluates the model and returns the loss")
        group = self.param_groups[0]
        lr = float(group["lr"])
        max_iter, max_eval = int(group["max_iter"]), int(group["max_eval"])
        tolerance_grad, tolerance_change = float(group["tolerance_grad"]), float(group["tolerance_change"])
        history_size = int(group["history_size"])
        state = self.state.setdefault(self._params[0], {})
        state.setdefault("func_evals", 0)
        state.setdefault("n_iter", 0)
        F = self._scalar

        def _dot(a: Tensor, b: Tensor):
            return _dot_of(a, b, F)

        with enable_grad():
            orig_loss = closure()
        loss = float(orig_loss)
        current_evals = 1
        state["func_evals"] += 1
        with no_grad():
            flat_grad = self._gather_flat_grad()
            if flat_grad.abs().max().item() <= tolerance_grad:
                return orig_loss
            d, t = state.get("d"), state.get("t")
            old_dirs, old_stps, ro = state.get("old_dirs"), state.get("old_stps"), state.get("ro")
            h_diag, prev_flat_grad, prev_loss = state.get("H_diag"), state.get("prev_flat_grad"), state.get("prev_loss")
            n_iter = 0
            while n_iter < max_iter:
                n_iter += 1
                state["n_iter"] += 1
                if state["n_iter"] == 1:
                    d = -flat_grad
                    old_dirs, old_stps, ro = [], [], []
                    h_diag = F(1.0)
                else:
                    y = flat_grad - prev_flat_grad
                    s = d * float(t)
                    ys = _dot(y, s)
                    if ys > 1e-10:
                        if len(old_dirs) == history_size:
                            old_dirs.pop(0)
                            old_stps.pop(0)
                            ro.pop(0)
                        old_dirs.append(y)
                        old_stps.append(s)
                        ro.append(F(1.0) / ys)
                        h_diag = ys / _dot(y, y)
                    al = [F(0.0)] * len(old_dirs)
                    q = -flat_grad
                    for i in range(len(old_dirs) - 1, -1, -1):
                        al[i] = _dot(old_stps[i], q) * ro[i]
                        q = q - old_dirs[i] * float(al[i])
                    r = q * float(h_diag)
                    for i in range(len(old_dirs)):
                        be_i = _dot(old_dirs[i], r) * ro[i]
                        r = r + old_stps[i] * float(al[i] - be_i)
                    d = r
                prev_flat_grad = flat_grad
                prev_loss = loss
                if state["n_iter"] == 1:
                    t = min(F(1.0), F(1.0) / F(flat_grad.abs().sum().item())) * lr
                else:
                    t = lr
                gtd = _dot(flat_grad, d)
                if gtd > -tolerance_change:
                    break
                ls_func_evals = 0
                self._add_grad(t, d)
                opt_cond = False
                if n_iter != max_iter:
                    with enable_grad():
                        loss = float(closure())
                    flat_grad = self._gather_flat_grad()
                    opt_cond = flat_grad.abs().max().item() <= tolerance_grad
                    ls_func_evals = 1
                current_evals += ls_func_evals
                state["func_evals"] += ls_func_evals
                if n_iter == max_iter or current_evals >= max_eval or opt_cond:
                    break
                if (d * float(t)).abs().max().item() <= tolerance_change:
                    break
                if abs(loss - prev_loss) < tolerance_change:
                    break
            state.update(d=d, t=t, old_dirs=old_dirs, old_stps=old_stps, ro=ro, H_diag=h_diag,
                         prev_flat_grad=prev_flat_grad, prev_loss=prev_loss)
        return orig_loss

    def state_dict(self):
        raise NotImplementedError("LBFGS.state_dict: the curvature history is not saved by anygpu yet")
