"""Classification losses (Layer 0): fused log-softmax + negative log-likelihood per row.

`cross_entropy_rows` reads logits [rows, classes] once per row and returns the per-row
pieces the reductions of torch's cross_entropy / nll_loss are built from; the backward
recomputes the softmax from the saved log-sum-exp, one thread per logit."""

from __future__ import annotations

from ..runtime import load_shader
from ._common import check_buffer, check_positive, grid_1d

__all__ = ["cross_entropy_rows", "cross_entropy_mean", "cross_entropy_rows_backward"]

# reduction='mean' sums its rows in one workgroup (cross_entropy_mean.wgsl): up to this many
# rows; more take the general reductions (nn.functional._class_loss).
MEAN_ROWS = 1 << 16


def _check(op, logits, target, weight, rows, classes):
    check_positive(op, rows=rows, classes=classes)
    check_buffer(op, "logits", logits, rows * classes, "rows*classes")
    check_buffer(op, "target", target, rows, "rows")
    if target.dtype != "i32":
        raise ValueError(f"{op}: target must hold int32 class indices, got {target.dtype}")
    check_buffer(op, "weight", weight, classes, "classes")


def _rows(dev, logits, target, weight, rows: int, classes: int, ignore_index: int, log_probs: bool,
          extra_stats: int = 0):
    _check("cross_entropy", logits, target, weight, rows, classes)
    parts, stats, row_weight = dev.empty(2 * rows), dev.empty(2 * rows + extra_stats), dev.empty(rows)
    kernel = dev.kernel("cross_entropy", load_shader("cross_entropy.wgsl"), 3, 3, "IIiI")
    dev.launch(kernel, [logits, target, weight], [parts, stats, row_weight],
               (rows, classes, int(ignore_index), int(log_probs)), dev.grid(rows))
    return parts, stats, row_weight


def cross_entropy_rows(dev, logits, target, weight, rows: int, classes: int,
                       ignore_index: int = -100, log_probs: bool = False):
    """Per-row losses of logits [rows, classes] against int32 target [rows] with class weights [classes].

    Returns (parts [2, rows]: nll = -w_t*log p_t and smooth = -sum_j w_j*log p_j per row,
    stats [rows, 2]: log-sum-exp and sum(w) for the backward, row_weight [rows]: w_t).
    Rows whose target is ignore_index give zeros; log_probs=True reads logits as
    log-probabilities (nll_loss). A target outside [0, classes) gives NaN."""
    return _rows(dev, logits, target, weight, rows, classes, ignore_index, log_probs)


def cross_entropy_mean(dev, logits, target, weight, rows: int, classes: int,
                       ignore_index: int = -100, log_probs: bool = False):
    """torch's reduction='mean' of the rows' nll: sum of nll / sum of w_t over the rows not
    ignored (NaN when all are), in two kernels, for at most MEAN_ROWS rows.

    Returns (loss [1], stats [2*rows + 1]: cross_entropy_rows' stats and the denominator,
    for cross_entropy_rows_backward(..., mean=True))."""
    if rows > MEAN_ROWS:
        raise ValueError(f"cross_entropy_mean: at most {MEAN_ROWS} rows, got {rows}")
    parts, stats, row_weight = _rows(dev, logits, target, weight, rows, classes, ignore_index, log_probs, 1)
    loss = dev.empty(1)
    kernel = dev.kernel("cross_entropy_mean", load_shader("cross_entropy_mean.wgsl"), 2, 2, "IIII")
    dev.launch(kernel, [parts, row_weight], [loss, stats], (rows, 0, 0, 0), (1, 1, 1))
    return loss, stats


def cross_entropy_rows_backward(dev, grad_parts, logits, target, weight, stats, rows: int, classes: int,
                                ignore_index: int = -100, log_probs: bool = False, mean: bool = False):
    """grad_logits [rows, classes] from grad_parts [2, rows] (the gradients of nll and smooth);
    mean=True: from the one gradient of cross_entropy_mean's loss (grad_parts [1], its stats)."""
    op = "cross_entropy_backward"
    _check(op, logits, target, weight, rows, classes)
    if mean:
        check_buffer(op, "grad_parts", grad_parts, 1, "1 (mean=True)")
        check_buffer(op, "stats", stats, 2 * rows + 1, "2*rows+1 (mean=True)")
    else:
        check_buffer(op, "grad_parts", grad_parts, 2 * rows, "2*rows")
        check_buffer(op, "stats", stats, 2 * rows, "2*rows")
    grad_logits = dev.empty(rows * classes)
    kernel = dev.kernel("cross_entropy_backward", load_shader("cross_entropy_backward.wgsl"), 5, 1, "IIiII")
    dev.launch(kernel, [grad_parts, logits, target, weight, stats], [grad_logits],
               (rows, classes, int(ignore_index), int(log_probs), int(mean)), grid_1d(dev, rows * classes))
    return grad_logits
