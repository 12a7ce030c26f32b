"""torch.onnx for anygpu: ``export(model, args, f, ...)`` writes an ONNX model of a forward.

How: the forward runs once on the given inputs, on the GPU, while the tracer (`_trace.py`)
watches the public ops it calls: Tensor methods and operators, the functions of
``anygpu.tensor``, ``anygpu.nn.functional`` and ``anygpu.functions``. Each op that reads a
value computed from the inputs either has a mapping to ONNX nodes (`_mappings.py`), or is
composed of ops that have one (its parts are recorded), or fails the export with
`UnsupportedOperatorError` naming it. Parameters and buffers become initializers under
their state-dict names; everything the forward computes without the inputs is folded
into constants. Wrapping the public API, rather than reading the autograd graph, keeps
each op's arguments (strides, paddings, eps, dims), which the graph's entries do not
record; the autograd graph serves as a second check (float inputs are traced with
requires_grad, so a value computed from them out of the tracer's sight is caught).

Limits: the graph is the path this one run took (Python control flow is baked in, as
with torch's tracer); dynamic_axes frees the named dims of inputs and outputs, and the
reshapes/expands that keep or merge them (see `_mappings.py`), but sizes computed in
Python from a dynamic dim are the traced ones. The tracer patches anygpu's functions for
the duration of the forward: do not run other anygpu work in other threads meanwhile.
It rebinds the functions that modules and the model's layers hold by name; one reached
through another reference (a closure, a functools.partial) runs unseen: on float values
the autograd check catches that, on integer values (token ids) it would be baked in.
Needs the ``onnx`` package: ``pip install 'anygpu[onnx]'``.
"""

from __future__ import annotations

import os
from typing import Any, Mapping, Sequence

from . import errors
from .errors import OnnxExporterError, UnsupportedOperatorError

__all__ = ["export", "errors", "OnnxExporterError", "UnsupportedOperatorError", "TrainingMode", "is_in_onnx_export"]

_EXPORTING = [False]
_MIN_OPSET = 11


class TrainingMode:
    """torch.onnx.TrainingMode: export always runs the model in eval mode (EVAL)."""

    EVAL = "eval"
    PRESERVE = "preserve"
    TRAINING = "training"


def is_in_onnx_export() -> bool:
    """True while `export` runs the model's forward."""
    return _EXPORTING[0]


def _require_onnx():
    try:
        import onnx
    except ImportError as error:  # ModuleNotFoundError included
        raise ModuleNotFoundError(
            "anygpu.onnx.export needs the 'onnx' package: pip install 'anygpu[onnx]'") from error
    return onnx


def _flat(value) -> list:
    if isinstance(value, (tuple, list)):
        return [leaf for item in value for leaf in _flat(item)]
    if isinstance(value, dict):
        return [leaf for item in value.values() for leaf in _flat(item)]
    return [value]


def _axes_spec(dynamic_axes: Mapping[str, Any] | None, known: set[str]) -> dict[str, dict[int, str]]:
    spec: dict[str, dict[int, str]] = {}
    for name, axes in (dynamic_axes or {}).items():
        if name not in known:
            raise ValueError(f"onnx.export: dynamic_axes names {name!r}, which is not one of the input or "
                             f"output names {sorted(known)}")
        if isinstance(axes, Mapping):
            spec[name] = {int(axis): str(label) for axis, label in axes.items()}
        elif isinstance(axes, (list, tuple)):
            spec[name] = {int(axis): f"{name}_dynamic_axes_{i + 1}" for i, axis in enumerate(axes)}
        else:
            raise ValueError(f"onnx.export: dynamic_axes[{name!r}] must be a dict {{axis: name}} or a list of "
                             f"axes, got {type(axes).__name__}")
    return spec


def _dims(shape, axes: dict[int, str], what: str) -> list:
    dims: list = list(shape)
    for axis, label in axes.items():
        position = axis + len(dims) if axis < 0 else axis
        if not 0 <= position < len(dims):
            raise ValueError(f"onnx.export: dynamic axis {axis} of {what} is out of range for its shape {tuple(shape)}")
        dims[position] = label
    return dims


def export(model, args=(), f=None, input_names: Sequence[str] | None = None,
           output_names: Sequence[str] | None = None, dynamic_axes: Mapping[str, Any] | None = None,
           opset_version: int | None = 17, do_constant_folding: bool = True, export_params: bool = True,
           verbose: bool | None = False, training=TrainingMode.EVAL, keep_initializers_as_inputs: bool = False,
           kwargs: Mapping[str, Any] | None = None, **ignored):
    """Trace ``model(*args)`` and write it as an ONNX model to `f` (a path or a binary file
    object; nothing is written when f is None). Returns the ``onnx.ModelProto``.

    args: a tensor or a tuple of them (a trailing dict is keyword arguments, as torch);
    inputs are the tensors in args, in order, named by input_names (default input_0, ...);
    outputs are the tensors the forward returns, flattened (default output_0, ...).
    dynamic_axes: {name: {axis: label}} or {name: [axes]} for inputs and outputs.
    opset_version: 11 or later (default 17). Parameters and buffers are initializers named
    as in the state dict (graph inputs instead with export_params=False). Constant folding
    is always on (computations without the inputs are constants). Other torch arguments
    (operator_export_type, dynamo, ...) are accepted and have no effect.
    """
    return _export_traced(model, args, f, input_names, output_names, dynamic_axes, opset_version, export_params,
                          verbose, training, keep_initializers_as_inputs, kwargs)[0]


def _export(model, args=(), f=None, export_params: bool = True, verbose: bool = False, training=TrainingMode.EVAL,
            input_names: Sequence[str] | None = None, output_names: Sequence[str] | None = None,
            operator_export_type=None, export_type=None, opset_version: int | None = None,
            do_constant_folding: bool = True, dynamic_axes: Mapping[str, Any] | None = None,
            keep_initializers_as_inputs: bool | None = None, **ignored):
    """torch.onnx._export (older scripts, e.g. fast_neural_style): as `export`, but returns the
    model's output of the traced run."""
    return _export_traced(model, args, f, input_names, output_names, dynamic_axes, opset_version, export_params,
                          verbose, training, bool(keep_initializers_as_inputs), None)[1]


def _export_traced(model, args, f, input_names, output_names, dynamic_axes, opset_version, export_params,
                   verbose, training, keep_initializers_as_inputs, kwargs):
    """export's work: (the ModelProto, the model's output of the traced run)."""
    onnx = _require_onnx()
    from onnx import helper

    from .. import nn
    from ..tensor import Tensor, enable_grad
    from . import _mappings
    from ._graph import Graph, elem_type
    from ._trace import Tracer, tracing

    opset = 17 if opset_version is None else int(opset_version)
    newest = onnx.defs.onnx_opset_version()
    if not _MIN_OPSET <= opset <= newest:
        raise ValueError(f"onnx.export: opset_version must be between {_MIN_OPSET} and {newest}, got {opset_version}")
    call_kwargs = dict(kwargs or {})
    positional = list(args) if isinstance(args, (tuple, list)) else [args]
    if positional and isinstance(positional[-1], dict):
        call_kwargs.update(positional.pop())
    if training not in (TrainingMode.EVAL, None, False) and str(training).lower().endswith("training"):
        raise ValueError("onnx.export: training mode export is not supported (dropout and batch statistics "
                         "are random or batch-dependent); export with training=TrainingMode.EVAL")

    graph = Graph(opset)
    named: dict[int, tuple[str, Any]] = {}
    if isinstance(model, nn.Module):
        for name, value in list(model.named_parameters()) + list(model.named_buffers()):
            if value is not None:
                named.setdefault(id(value), (name, value))
    tracer = Tracer(graph, named, params_as_inputs=not export_params)

    # Inputs: detached copies (float ones requiring grad, for the autograd check), bound to names.
    input_tensors = [t for t in _flat(positional) + _flat(call_kwargs) if isinstance(t, Tensor)]
    input_labels = list(input_names or [])
    if len(input_labels) > len(input_tensors):
        raise ValueError(f"onnx.export: {len(input_labels)} input_names for {len(input_tensors)} input tensors")
    input_labels += [f"input_{i}" for i in range(len(input_labels), len(input_tensors))]
    replacements: dict[int, Any] = {}
    for tensor_in in input_tensors:
        if id(tensor_in) not in replacements:
            copy = tensor_in.detach()
            if tensor_in.dtype.is_floating_point:
                copy.requires_grad_(True)
            replacements[id(tensor_in)] = copy

    def swap(value):
        if isinstance(value, Tensor):
            return replacements[id(value)]
        if isinstance(value, tuple) and hasattr(value, "_fields"):
            return type(value)(*(swap(v) for v in value))
        if isinstance(value, (tuple, list)):
            return type(value)(swap(v) for v in value)
        if isinstance(value, dict):
            return {k: swap(v) for k, v in value.items()}
        return value

    call_args = [swap(v) for v in positional]
    call_kwargs = {k: swap(v) for k, v in call_kwargs.items()}
    traced_inputs = [replacements[id(t)] for t in input_tensors]

    was_training = getattr(model, "training", None)
    frozen = [p for _, p in named.values() if p.requires_grad]
    _EXPORTING[0] = True
    try:
        if isinstance(model, nn.Module):
            model.eval()
        for p in frozen:
            p.requires_grad = False
        namespaces = tuple(vars(m) for m in model.modules()) if isinstance(model, nn.Module) else ()
        with enable_grad(), tracing(tracer, _mappings.METHODS, _mappings.FUNCTIONS, namespaces):
            for label, tensor_in in zip(input_labels, traced_inputs):
                tracer.bind(tensor_in, graph.claim(label))
                graph.types[label] = elem_type(tensor_in.dtype)
            result = model(*call_args, **call_kwargs)
            outputs = [t for t in _flat(result) if isinstance(t, Tensor)]
            if not outputs:
                raise ValueError("onnx.export: the model returned no tensor")
            output_labels = list(output_names or [])
            if len(output_labels) > len(outputs):
                raise ValueError(f"onnx.export: {len(output_labels)} output_names for {len(outputs)} outputs")
            output_labels += [f"output_{i}" for i in range(len(output_labels), len(outputs))]
            sources = [tracer.name(t) for t in outputs]
    finally:
        _EXPORTING[0] = False
        for p in frozen:
            p.requires_grad = True
        if isinstance(model, nn.Module) and was_training:
            model.train(True)

    axes = _axes_spec(dynamic_axes, set(input_labels) | set(output_labels))
    inputs = [graph.value_info(label, elem_type(t.dtype), _dims(t.shape, axes.get(label, {}), f"input {label!r}"))
              for label, t in zip(input_labels, traced_inputs)]
    for label, source, t in zip(output_labels, sources, outputs):
        graph.claim(label)
        graph.nodes.append(helper.make_node("Identity", [source], [label]))
        graph.outputs.append(graph.value_info(label, elem_type(t.dtype),
                                              _dims(t.shape, axes.get(label, {}), f"output {label!r}")))
    graph_inputs = inputs + graph.inputs
    if keep_initializers_as_inputs:
        graph_inputs += [graph.value_info(init.name, init.data_type, list(init.dims)) for init in graph.initializers]
    onnx_graph = helper.make_graph(graph.nodes, "anygpu", graph_inputs, graph.outputs, graph.initializers)
    opsets = [helper.make_opsetid("", opset)]
    proto = helper.make_model(onnx_graph, opset_imports=opsets, producer_name="anygpu",
                              producer_version=_version())
    proto.ir_version = helper.find_min_ir_version_for(opsets)
    onnx.checker.check_model(proto)
    if verbose:
        print(helper.printable_graph(proto.graph))
    result = _detached(result)
    if f is not None:
        payload = proto.SerializeToString()
        if isinstance(f, (str, os.PathLike)):
            from ..io.nanosign import atomic_write_bytes
            atomic_write_bytes(f, payload)
        elif hasattr(f, "write"):
            f.write(payload)
        else:
            raise ValueError(f"onnx.export: f must be a path or a binary file object, got {type(f).__name__}")
    return proto, result


def _detached(value):
    """The traced output without the autograd graph the tracer's requires_grad inputs gave it."""
    from ..tensor import Tensor
    if isinstance(value, Tensor):
        return value.detach()
    if isinstance(value, tuple) and hasattr(value, "_fields"):
        return type(value)(*(_detached(v) for v in value))
    if isinstance(value, (tuple, list)):
        return type(value)(_detached(v) for v in value)
    if isinstance(value, dict):
        return {k: _detached(v) for k, v in value.items()}
    return value


def _version() -> str:
    from .. import __version__
    return __version__
