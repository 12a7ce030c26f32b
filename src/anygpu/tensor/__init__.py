"""Layer 2: Tensor, with PyTorch's names and semantics, recorded onto the autograd engine.

A Tensor is a contiguous row-major GPU Buffer plus a shape and a dtype; a view shares
its base's Buffer (views.py: whole-buffer views hold the Buffer itself, strided views
gather their elements when read and scatter in-place writes back). Each
differentiable op launches its forward kernels and creates, beside them, the `Entry`
whose backward closure routes the output's gradient to the inputs; `Tensor.backward`
sorts the graph into a flat tape and runs the engine's one `reverse_walk` over it (the
same walk the Layer-1 Tape uses).

The modules, lowest first: `core` (the Tensor class), `grad_mode`, `rng`, `recording`
(autograd glue), `creation`, `elementwise`, `views`, `inplace`, `indexing`, `shape`,
`special`, `linear`, `reductions`, `sorting`, `grad`; `function` (autograd.Function) and
`linalg`. `core` is imported first: the others import Tensor from it.
"""

# Every name the single module `tensor.py` had, from the module that now holds it.
from ..dtypes import bfloat16, float16, float32, int32, int64  # noqa: F401
from ..ops import gpu  # noqa: F401
from .core import (  # noqa: F401
    bool_, long, half, _BUF_DTYPE, _NP_DTYPE, post_backward_hooks, grad_ready_hooks, MaxResult, _normalize_dtype, _check_half, _is_int, _as_shape, _dim, RemovableHandle, Tensor,
    Storage, StridedView,
)
from .grad_mode import (  # noqa: F401
    _state, _ANOMALY, is_anomaly_enabled, is_anomaly_check_nan_enabled, set_detect_anomaly, detect_anomaly, _nan_check, is_grad_enabled, _GradMode, no_grad, enable_grad, inference_mode, is_inference_mode_enabled, set_grad_enabled,
)
from .rng import (  # noqa: F401
    _seed, _rng, manual_seed, initial_seed, seed, _STATE_WORDS, default_generator, _generator_rng,
)
from .recording import (  # noqa: F401
    _view_host, _half_result, _record, _HALF_RULES, _converting_backward, _attach, _freed_entry, _topological_order, sum_dims, sum_to_shape,
)
from .creation import (  # noqa: F401
    get_rng_state, set_rng_state, _infer_dtype, tensor, from_numpy, full, zeros, ones, empty, zeros_like, ones_like, empty_like, full_like, arange, linked_empty, _check_fits, _random_float, rand, randn, randint, multinomial, randperm,
)
from .elementwise import (  # noqa: F401
    _autocast, _to_tensor, _number_dtype, _result_dtype, _float_operand, _float_operands, _int_operand, _cast, _INT_BINARY_OPS, _int_binary, _is_scalar, _binary, _SCALAR_OPS, _scalar_binary, _compare, _int_unary, _INT_KEEPING_UNARY, _unary, unary_op, _as_float,
)
from .views import (  # noqa: F401
    reshape, _torch_contiguous, _view_strides, permute, expand,
)
from .inplace import (  # noqa: F401
    _inplace_keys, _graph_ancestors, _inplace,
)
from .indexing import (  # noqa: F401
    _expand_index, _MaskDims, _basic_view, _flat_positions, _has_tensor_items, getitem, setitem, nonzero, _index_tensor, _check_index_range, gather, index_select, where, scatter,
)
from .shape import (  # noqa: F401
    _triangle, cat, stack, _moved_last, _moved_back, flip, roll, diag, repeat_interleave, movedim, meshgrid, cartesian_prod,
)
from .special import (  # noqa: F401
    _ERFINV_CENTRAL, _ERFINV_TAIL, _LANCZOS, _sin_cos_pi, _lgamma_values, _digamma_values, Lgamma, Erfinv, _erfinv_values,
)
from .linear import (  # noqa: F401
    _matmul_int, matmul, einsum, _einsum_pair, _sum_own, _scaled_sum, cdist,
)
from .reductions import (  # noqa: F401
    _dims, _reduce_sum_int, _reduce_sum, _reduce_extreme, _reduce_extreme_int, _arg_reduce, softmax, _max_detached, _in_float32, log_softmax, logsumexp, _CUMSUM_BLOCK, _cumulative_extreme, cumsum, prod, cumprod,
)
from .sorting import (  # noqa: F401
    SortResult, sort, argsort, topk, unique, bincount, bucketize, searchsorted,
)
from .grad import (  # noqa: F401
    autograd_grad,
)

# torch-compat additions, each module's METHODS on Tensor (tensor/compat_common.py)
from . import compat_linalg, compat_math, compat_misc, compat_reduce, compat_shape  # noqa: E402
from .compat_common import attach as _attach_compat  # noqa: E402
for _module in (compat_math, compat_reduce, compat_shape, compat_misc, compat_linalg):
    _attach_compat(Tensor, _module.METHODS)
