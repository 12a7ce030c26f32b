"""Classification losses (Layer 0): fused log-softmax + negative log-likelihood per row.

`cross_entropy_rows` reads logits [rows, classes] once per row and returns the per-row
pieces the reductions of torch's cross_entropy / nll_loss are built from; the backward
recomputes the softmax from the saved log-sum-exp, one thread per logit."""

from __future__ import annotations

from ..runtime import load_shader
from ._common import check_buffer, check_positive, grid_1d

__all__ = ["cross_entropy_rows", "cross_entropy_rows_backward"]


def _check(op, logits, target, weight, rows, classes):
    check_positive(op, rows=rows, classes=classes)
    check_buffer(op, "logits", logits, rows * classes, "rows*classes")
    check_buffer(op, "target", target, rows, "rows")
    if target.dtype != "i32":
        raise ValueError(f"{op}: target must hold int32 class indices, got {target.dtype}")
    check_buffer(op, "weight", weight, classes, "classes")


def cross_entropy_rows(dev, logits, target, weight, rows: int, classes: int,
                       ignore_index: int = -100, log_probs: bool = False):
    """Per-row losses of logits [rows, classes] against int32 target [rows] with class weights [classes].

    Returns (parts [2, rows]: nll = -w_t*log p_t and smooth = -sum_j w_j*log p_j per row,
    stats [rows, 2]: log-sum-exp and sum(w) for the backward, row_weight [rows]: w_t).
    Rows whose target is ignore_index give zeros; log_probs=True reads logits as
    log-probabilities (nll_loss). A target outside [0, classes) gives NaN."""
    _check("cross_entropy", logits, target, weight, rows, classes)
    parts, stats, row_weight = dev.empty(2 * rows), dev.empty(2 * rows), dev.empty(rows)
    kernel = dev.kernel("cross_entropy", load_shader("cross_entropy.wgsl"), 3, 3, "IIiI")
    dev.launch(kernel, [logits, target, weight], [parts, stats, row_weight],
               (rows, classes, int(ignore_index), int(log_probs)), dev.grid(rows))
    return parts, stats, row_weight


def cross_entropy_rows_backward(dev, grad_parts, logits, target, weight, stats, rows: int, classes: int,
                                ignore_index: int = -100, log_probs: bool = False):
    """grad_logits [rows, classes] from grad_parts [2, rows] (the gradients of nll and smooth)."""
    _check("cross_entropy_backward", logits, target, weight, rows, classes)
    check_buffer("cross_entropy_backward", "grad_parts", grad_parts, 2 * rows, "2*rows")
    check_buffer("cross_entropy_backward", "stats", stats, 2 * rows, "2*rows")
    grad_logits = dev.empty(rows * classes)
    kernel = dev.kernel("cross_entropy_backward", load_shader("cross_entropy_backward.wgsl"), 5, 1, "IIiI")
    dev.launch(kernel, [grad_parts, logits, target, weight, stats], [grad_logits],
               (rows, classes, int(ignore_index), int(log_probs)), grid_1d(dev, rows * classes))
    return grad_logits
