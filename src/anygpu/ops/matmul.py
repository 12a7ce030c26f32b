"""Matrix products (Layer 0): matmul, batch_matmul and the strided form autograd uses.

The kernel is a member of the register-blocked family (ops/matmul_gen.py) that the
autotuner (ops/tuner.py; matmul's candidates in ops/matmul_tune.py) picks per device and
shape bucket, or the simple 64x64 tiled kernel (kernels/matmul_tiled.wgsl), which is
always correct and is used for small products and whenever a family member cannot run."""

from __future__ import annotations

import functools

from ..runtime import GpuError, LimitError
from . import fusion, matmul_tune, sgmat
from ._common import check_buffer, check_positive
from .matmul_gen import Epilogue, Problem, can_stream, launch


def matmul_strided(dev, a, b, batch: int, m: int, n: int, k: int,
                   trans_a: bool = False, trans_b: bool = False,
                   a_batch: bool = True, b_batch: bool = True, alpha: float = 1.0, op: str = "matmul",
                   bias=None, out_dtype: str | None = None):
    """C[z] = alpha * op(A[z]) @ op(B[z]) (+ bias) for z < batch, C row-major [batch, m, n], of
    a's dtype (f32; f16 stored, summed in f32; i32 exact, wrapping at 32 bits).

    A is stored [m, k] row-major ([k, m] if trans_a); B [k, n] ([n, k] if trans_b).
    a_batch/b_batch False broadcast one matrix over the batch (stride 0). bias: a Buffer of
    n elements of a's float dtype added to every row (a linear layer's), in the kernel's store.
    out_dtype "f32" with f16 operands: the f32 sums themselves (matrix units store them as they
    are; elsewhere the f16 result is widened).

    A float product is deferred like an elementwise op (ops/fusion.py, when the device
    fuses): the elementwise ops that read it before other work comes are folded into its
    store (an epilogue), so `relu(x @ w.T + b)` is one kernel."""
    check_positive(op, batch=batch, m=m, n=n, k=k)
    a_rows, a_cols = (k, m) if trans_a else (m, k)
    b_rows, b_cols = (n, k) if trans_b else (k, n)
    check_buffer(op, "a", a, (batch if a_batch else 1) * m * k,
                 f"{'batch*' if a_batch and batch > 1 else ''}{a_rows}*{a_cols}")
    check_buffer(op, "b", b, (batch if b_batch else 1) * k * n,
                 f"{'batch*' if b_batch and batch > 1 else ''}{b_rows}*{b_cols}")
    if batch > 65535:
        raise LimitError(f"{op}: batch of {batch} is over the adapter's max-compute-workgroups-per-dimension (65535)")
    if a.dtype != b.dtype or a.dtype not in ("f32", "f16", "i32"):
        raise ValueError(f"{op}: a and b must both be f32, f16 or i32, got {a.dtype} and {b.dtype}")
    if a.dtype == "i32" and alpha != 1.0:
        raise ValueError(f"{op}: an i32 product takes no alpha (got {alpha}); scale the result instead")
    if out_dtype not in (None, a.dtype) and not (a.dtype == "f16" and out_dtype == "f32"):
        raise ValueError(f"{op}: out_dtype must be the operands' dtype or f32 for f16 operands, "
                         f"got {out_dtype} for {a.dtype}")
    if bias is not None:
        check_buffer(op, "bias", bias, n, "n")
        if bias.dtype != a.dtype or a.dtype == "i32":
            raise ValueError(f"{op}: bias must be of the operands' float dtype ({a.dtype}), got {bias.dtype}")
    problem = Problem(int(batch), int(m), int(n), int(k), bool(trans_a), bool(trans_b),
                      bool(a_batch), bool(b_batch), float(alpha))
    if a.dtype == "f16":
        # Matrix units (tensor cores, ...), the tuner's member for this shape: launched at once,
        # not deferred; a bias is added in the kernel's store, later elementwise ops run as their
        # own (fused) kernels. None: no matrix units here (or they failed).
        out = sgmat.matmul(dev, problem, a, b, out_dtype or "f16", bias)
        if out is not None:
            return out
    # The tuned family reads f32 and f16 (summing in f32); i32 takes the simple kernel.
    config = matmul_tune.choose(dev, problem, a.dtype) if a.dtype != "i32" else None
    unstreamed = config
    if config is not None and config.stream:
        # A stream-K winner runs its ordinary form where the product cannot stream (an
        # epilogue, edge tiles): a grid of 128-wide tiles that may fill a few of the GPU's
        # multiprocessors (an MLP's 256x512 layer: 8 workgroups, 99 us on an H200 where the
        # best other tile took 25). Such products take the tuner's best without stream-K forms,
        # chosen here, since tuning may wait for the GPU: not inside a deferred launch.
        unstreamed = matmul_tune.choose(dev, problem, a.dtype, stream=False)
        if bias is not None or not can_stream(config, problem, a.dtype):
            config = unstreamed
    if out_dtype not in (None, a.dtype):
        return dev.cast(matmul_strided(dev, a, b, batch, m, n, k, trans_a, trans_b, a_batch, b_batch, alpha, op,
                                       bias), out_dtype)
    if dev.fuse and a.dtype in fusion.FUSABLE:
        return fusion.defer_product(dev, batch * m * n, a.dtype,
                                    functools.partial(_launch, dev, config, problem, a, b, bias,
                                                      fused_config=unstreamed),
                                    3 if bias is not None else 2)
    out = dev.empty(batch * m * n, a.dtype)
    _launch(dev, config, problem, a, b, bias, out, fused_config=unstreamed)
    return out


def _launch(dev, config, problem: Problem, a, b, bias, out, steps: tuple = (), written: tuple = (0,),
            extras: tuple = (), outputs: tuple = (), values: tuple = (), *, fused_config) -> None:
    """Record the product into out with `config` (None: the simple kernel), falling back to
    the simple kernel where the config cannot run, through the epilogue of `bias` and the
    elementwise `steps` (see matmul_gen.Epilogue; extras, outputs and values: its other
    inputs, other written values and scalars) when there is one. fused_config: the config
    to use when there is an epilogue (matmul_strided: `config`, or for a stream-K `config` the
    tuner's best without stream-K forms, which may be the simple kernel, None)."""
    epilogue = None
    if bias is not None or steps:
        epilogue = Epilogue(bias is not None, steps, written)
        extras = ((bias,) if bias is not None else ()) + tuple(extras)
        config = fused_config
    if config is not None:
        try:
            launch(dev, config, problem, a, b, out, epilogue, extras, outputs, values)
            return
        except LimitError:   # this shape's grid is too large for this tile: the simple kernel's may fit
            pass
        except GpuError as exc:  # this family member does not compile here: never again
            matmul_tune.forget(dev, config, str(exc), a.dtype)
    launch(dev, None, problem, a, b, out, epilogue, extras, outputs, values)


def matmul(dev, a, b, m: int, n: int, k: int):
    """C = A @ B with A [m, k] and B [k, n] row-major; returns C [m, n]."""
    return matmul_strided(dev, a, b, 1, m, n, k, op="matmul")


def batch_matmul(dev, a, b, batch: int, m: int, n: int, k: int):
    """C[i] = A[i] @ B[i] for i < batch; A [batch, m, k], B [batch, k, n] -> C [batch, m, n]."""
    return matmul_strided(dev, a, b, batch, m, n, k, op="batch_matmul")
