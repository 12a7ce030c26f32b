"""`SummaryWriter` with torch.utils.tensorboard's signature, on the tensorboard package.

Each ``add_*`` builds a ``Summary`` protocol buffer (tensorboard.compat.proto) and hands an
``Event`` to tensorboard's ``EventFileWriter``, which queues it and writes
``events.out.tfevents.*`` files (flushed every ``flush_secs``, when ``max_queue`` events
wait, on ``flush()`` and on ``close()``). ``add_scalars`` writes one sub-folder per key, as
torch does, so TensorBoard draws the keys as runs on one chart; ``add_hparams`` writes its
session to a sub-folder named ``run_name``.

``add_graph`` traces the forward with `anygpu.onnx.export` (extra anygpu[onnx]) and writes
its nodes as a TensorBoard GraphDef; without onnx, or for an untraceable forward, it warns
and writes nothing.
"""

from __future__ import annotations

import math
import os
import socket
import sys
import time
import warnings
from collections.abc import Mapping, Sequence
from datetime import datetime
from typing import Any

import numpy as np

__all__ = ["SummaryWriter"]

_EXTRA = "pip install 'anygpu[tensorboard]'"


def _tensorboard():
    """The tensorboard modules the writer uses; ImportError naming the extra when missing."""
    try:
        from tensorboard.compat.proto import event_pb2, summary_pb2, tensor_pb2, tensor_shape_pb2, types_pb2
        from tensorboard.summary.writer.event_file_writer import EventFileWriter
    except ImportError as error:
        raise ImportError(f"SummaryWriter needs the tensorboard package ({error}); install it with {_EXTRA}") \
            from None
    return EventFileWriter, event_pb2, summary_pb2, tensor_pb2, tensor_shape_pb2, types_pb2


def _array(value, op: str) -> np.ndarray:
    """A host array of an anygpu Tensor, a torch tensor, a NumPy array or Python numbers."""
    if hasattr(value, "detach"):
        value = value.detach()
    if hasattr(value, "numpy") and not isinstance(value, (np.ndarray, np.generic)):
        try:
            value = value.numpy()
        except (TypeError, RuntimeError):  # e.g. a torch bfloat16 tensor
            value = value.float().numpy()
    try:
        array = np.asarray(value)
    except (TypeError, ValueError) as error:
        raise ValueError(f"{op}: expected a tensor, an array or numbers, got {type(value).__name__} "
                         f"({error})") from None
    if array.dtype.kind not in "biuf":
        raise ValueError(f"{op}: expected numbers, got an array of dtype {array.dtype}")
    return array


def _scalar(value, op: str) -> float:
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        return float(value)
    array = _array(value, op)
    if array.size != 1:
        raise ValueError(f"{op}: expected a single value, got shape {array.shape}")
    return float(array.reshape(-1)[0])


def _step(global_step, op: str) -> int | None:
    if global_step is None:
        return None
    if hasattr(global_step, "item"):
        global_step = global_step.item()
    if isinstance(global_step, bool) or not isinstance(global_step, (int, np.integer)) and not (
            isinstance(global_step, float) and global_step.is_integer()):
        raise ValueError(f"{op}: global_step must be an integer, got {global_step!r}")
    return int(global_step)


def _to_hwc(array: np.ndarray, dataformats: str, op: str) -> np.ndarray:
    """(H, W, C) with C in 1, 3, 4 from an image laid out as `dataformats` ('CHW', 'HWC', 'HW', ...)."""
    letters = dataformats.upper()
    if sorted(letters) not in (sorted("CHW"), sorted("HW")) or len(set(letters)) != len(letters):
        raise ValueError(f"{op}: dataformats {dataformats!r}; expected an order of 'CHW' or 'HW'")
    if array.ndim != len(letters):
        raise ValueError(f"{op}: an image of shape {array.shape} does not match dataformats {dataformats!r}")
    if "C" not in letters:
        array, letters = array[..., None], letters + "C"
    array = np.transpose(array, [letters.index(axis) for axis in "HWC"])
    if array.shape[2] not in (1, 3, 4):
        raise ValueError(f"{op}: an image with {array.shape[2]} channels; expected 1, 3 or 4")
    return array


def _uint8(array: np.ndarray) -> np.ndarray:
    """torch's rule: uint8 images as they are, others are in [0, 1] and scaled by 255."""
    if array.dtype == np.uint8:
        return array
    scaled = np.nan_to_num(array.astype(np.float32) * 255.0, nan=0.0)
    return np.clip(scaled, 0, 255).astype(np.uint8)


def _grid(images: np.ndarray) -> np.ndarray:
    """(N, H, W, C) images as one (rows*H, cols*W, C) image, cols = ceil(sqrt(N)), row by row."""
    count, height, width, channels = images.shape
    cols = max(1, math.ceil(math.sqrt(count)))
    rows = max(1, math.ceil(count / cols))
    canvas = np.zeros((rows * height, cols * width, channels), dtype=images.dtype)
    for index in range(count):
        row, col = divmod(index, cols)
        canvas[row * height:(row + 1) * height, col * width:(col + 1) * width] = images[index]
    return canvas


def _tensorflow_bucket_edges() -> np.ndarray:
    """TensorFlow's default histogram buckets: ±1e-12 * 1.1**k up to 1e20, and 0."""
    positive = 1e-12 * 1.1 ** np.arange(0, math.ceil(math.log(1e32) / math.log(1.1)))
    positive = positive[positive < 1e20]
    return np.concatenate([[-np.inf], -positive[::-1], [0.0], positive, [np.inf]])


def _histogram(values: np.ndarray, bins, max_bins: int | None, op: str) -> tuple[np.ndarray, np.ndarray]:
    """(right edges, counts) of the non-empty span of the histogram."""
    if isinstance(bins, str) and bins == "tensorflow":
        counts, edges = np.histogram(values, bins=_tensorflow_bucket_edges())
    else:
        try:
            counts, edges = np.histogram(values, bins=bins)
        except (ValueError, TypeError) as error:
            raise ValueError(f"{op}: bins {bins!r}: {error}") from None
    limits = edges[1:].astype(np.float64)
    nonzero = np.flatnonzero(counts)
    first, last = int(nonzero[0]), int(nonzero[-1])
    counts, limits = counts[first:last + 1], limits[first:last + 1]
    if not np.isfinite(limits[-1]):  # the last TensorFlow bucket's edge: the largest value
        limits[-1] = float(values.max())
    if max_bins is not None and len(counts) > max_bins:
        group = math.ceil(len(counts) / max_bins)
        pad = -len(counts) % group
        counts = np.concatenate([counts, np.zeros(pad, counts.dtype)]).reshape(-1, group).sum(axis=1)
        limits = np.concatenate([limits, np.full(pad, limits[-1])]).reshape(-1, group)[:, -1]
    return limits, counts


def _graph_def(onnx_graph, state_names: set[str]):
    """A TensorBoard GraphDef of an ONNX graph: inputs and outputs as 'IO Node's, initializers
    as 'Parameter' nodes named by their state-dict path ('0.weight' -> '0/weight') or as
    'Constant' nodes (values the forward computed without the inputs), and each
    ONNX node named '<module>/<op>' after the first parameter it reads, so TensorBoard folds
    a layer's nodes into one box."""
    from tensorboard.compat.proto import attr_value_pb2, graph_pb2, node_def_pb2, versions_pb2

    def text(value: str):
        return attr_value_pb2.AttrValue(s=value.encode())

    nodes, producer, used = [], {}, set()

    def unique(name: str) -> str:
        candidate, index = name, 1
        while candidate in used:
            candidate, index = f"{name}_{index}", index + 1
        used.add(candidate)
        return candidate

    for value in onnx_graph.input:
        producer[value.name] = unique(value.name)
        nodes.append(node_def_pb2.NodeDef(name=producer[value.name], op="IO Node"))
    parameters = {}
    for initializer in onnx_graph.initializer:
        state = initializer.name in state_names
        producer[initializer.name] = unique(initializer.name.replace(".", "/") if state else initializer.name)
        if state:
            parameters[initializer.name] = producer[initializer.name]
        nodes.append(node_def_pb2.NodeDef(name=producer[initializer.name], op="Parameter" if state else "Constant",
                                          attr={"shape": text(str(list(initializer.dims)))}))
    for node in onnx_graph.node:
        scope = next((parameters[name].rpartition("/")[0] for name in node.input if name in parameters), "")
        name = unique(f"{scope}/{node.op_type}" if scope else node.op_type)
        nodes.append(node_def_pb2.NodeDef(name=name, op=node.op_type,
                                          input=[producer[i] for i in node.input if i in producer]))
        for output in node.output:
            producer[output] = name
    for value in onnx_graph.output:
        nodes.append(node_def_pb2.NodeDef(name=unique(value.name), op="IO Node",
                                          input=[producer[value.name]] if value.name in producer else []))
    return graph_pb2.GraphDef(node=nodes, versions=versions_pb2.VersionDef(producer=22))


class SummaryWriter:
    """Write TensorBoard event files into ``log_dir`` (torch.utils.tensorboard.SummaryWriter).

    log_dir: the folder (made if missing); default ``runs/<date>_<host><comment>``.
    purge_step: events at and after this step that an earlier run wrote to the same folder
    are hidden by TensorBoard (continuing after a crash). max_queue / flush_secs: the writer
    flushes when that many events wait or that many seconds passed. filename_suffix: added
    to the event file's name.
    """

    def __init__(self, log_dir: str | os.PathLike | None = None, comment: str = "", purge_step: int | None = None,
                 max_queue: int = 10, flush_secs: int = 120, filename_suffix: str = ""):
        self._tb = _tensorboard()
        if log_dir is None:
            stamp = datetime.now().strftime("%b%d_%H-%M-%S")
            log_dir = os.path.join("runs", f"{stamp}_{socket.gethostname()}{comment}")
        self.log_dir = os.fspath(log_dir)
        self.purge_step = _step(purge_step, "SummaryWriter")
        self.max_queue, self.flush_secs, self.filename_suffix = int(max_queue), int(flush_secs), filename_suffix
        self._scalar_writers: dict[str, Any] = {}
        self._closed = False
        self._writer = self._open(self.log_dir, self.purge_step)

    # ------------------------------------------------------------------ plumbing

    def _open(self, folder: str, purge_step: int | None):
        EventFileWriter, event_pb2 = self._tb[0], self._tb[1]
        os.makedirs(folder, exist_ok=True)
        writer = EventFileWriter(folder, self.max_queue, self.flush_secs, self.filename_suffix)
        if purge_step is not None:  # TensorBoard drops earlier events from this step on
            writer.add_event(event_pb2.Event(step=purge_step, file_version="brain.Event:2"))
            writer.add_event(event_pb2.Event(step=purge_step, session_log=event_pb2.SessionLog(
                status=event_pb2.SessionLog.START)))
        return writer

    def get_logdir(self) -> str:
        """The folder this writer writes to."""
        return self.log_dir

    def _check_open(self, op: str) -> None:
        if self._closed:
            raise ValueError(f"{op}: the SummaryWriter is closed")

    def _write(self, values: list, global_step, walltime, op: str, writer=None) -> None:
        self._check_open(op)
        event_pb2, summary_pb2 = self._tb[1], self._tb[2]
        event = event_pb2.Event(summary=summary_pb2.Summary(value=values),
                                wall_time=time.time() if walltime is None else float(walltime))
        step = _step(global_step, op)
        if step is not None:
            event.step = step
        (writer or self._writer).add_event(event)

    def _tensor(self, dtype_name: str, shape: Sequence[int], **fields):
        tensor_pb2, tensor_shape_pb2, types_pb2 = self._tb[3], self._tb[4], self._tb[5]
        return tensor_pb2.TensorProto(
            dtype=getattr(types_pb2, dtype_name),
            tensor_shape=tensor_shape_pb2.TensorShapeProto(
                dim=[tensor_shape_pb2.TensorShapeProto.Dim(size=side) for side in shape]),
            **fields)

    def _plugin(self, name: str, content: bytes = b""):
        summary_pb2 = self._tb[2]
        return summary_pb2.SummaryMetadata(plugin_data=summary_pb2.SummaryMetadata.PluginData(
            plugin_name=name, content=content))

    # ------------------------------------------------------------------ scalars

    def add_scalar(self, tag: str, scalar_value, global_step=None, walltime=None, new_style: bool = False,
                   double_precision: bool = False) -> None:
        """One number at a step. new_style writes it as a tensor summary of the scalars plugin
        (float64 with double_precision) instead of the classic simple_value."""
        value = _scalar(scalar_value, "add_scalar")
        summary_pb2 = self._tb[2]
        if new_style:
            if double_precision:
                proto = self._tensor("DT_DOUBLE", (), double_val=[value])
            else:
                proto = self._tensor("DT_FLOAT", (), float_val=[value])
            entry = summary_pb2.Summary.Value(tag=tag, tensor=proto, metadata=self._plugin("scalars"))
        else:
            entry = summary_pb2.Summary.Value(tag=tag, simple_value=value)
        self._write([entry], global_step, walltime, "add_scalar")

    def add_scalars(self, main_tag: str, tag_scalar_dict: Mapping[str, Any], global_step=None,
                    walltime=None) -> None:
        """Several numbers on one chart: each key is written to its own sub-folder
        ``<log_dir>/<main_tag>_<key>`` (a run of its own) under the tag ``main_tag``."""
        if not isinstance(tag_scalar_dict, Mapping):
            raise ValueError(f"add_scalars: expected a dict of tag to number, got {type(tag_scalar_dict).__name__}")
        summary_pb2 = self._tb[2]
        walltime = time.time() if walltime is None else walltime
        for key, raw in tag_scalar_dict.items():
            value = _scalar(raw, f"add_scalars[{key!r}]")
            folder = os.path.join(self.log_dir, f"{main_tag.replace('/', '_')}_{key}")
            self._check_open("add_scalars")
            writer = self._scalar_writers.get(folder)
            if writer is None:
                writer = self._scalar_writers[folder] = self._open(folder, self.purge_step)
            self._write([summary_pb2.Summary.Value(tag=main_tag, simple_value=value)], global_step, walltime,
                        "add_scalars", writer)

    # ------------------------------------------------------------------ histograms

    def add_histogram(self, tag: str, values, global_step=None, bins="tensorflow", walltime=None,
                      max_bins: int | None = None) -> None:
        """The distribution of `values` (any shape): bins 'tensorflow' (TensorFlow's
        exponential buckets, torch's default), a count, or any of NumPy's bin rules."""
        array = _array(values, "add_histogram").astype(np.float64).reshape(-1)
        if array.size == 0:
            raise ValueError("add_histogram: values is empty")
        if not np.isfinite(array).all():
            raise ValueError(f"add_histogram: values hold {int((~np.isfinite(array)).sum())} NaN or infinite "
                             "elements")
        limits, counts = _histogram(array, bins, max_bins, "add_histogram")
        self.add_histogram_raw(tag, float(array.min()), float(array.max()), array.size, float(array.sum()),
                               float(np.dot(array, array)), limits, counts, global_step, walltime)

    def add_histogram_raw(self, tag: str, min, max, num, sum, sum_squares, bucket_limits, bucket_counts,  # noqa: A002
                          global_step=None, walltime=None) -> None:
        """A histogram already counted: bucket i holds bucket_counts[i] values up to bucket_limits[i]."""
        limits = [float(v) for v in _array(bucket_limits, "add_histogram_raw").reshape(-1)]
        counts = [float(v) for v in _array(bucket_counts, "add_histogram_raw").reshape(-1)]
        if len(limits) != len(counts):
            raise ValueError(f"add_histogram_raw: {len(limits)} bucket limits and {len(counts)} counts; "
                             "expected as many of each")
        summary_pb2 = self._tb[2]
        proto = summary_pb2.HistogramProto(min=float(min), max=float(max), num=float(num), sum=float(sum),
                                           sum_squares=float(sum_squares), bucket_limit=limits, bucket=counts)
        self._write([summary_pb2.Summary.Value(tag=tag, histo=proto)], global_step, walltime, "add_histogram")

    # ------------------------------------------------------------------ images

    def _image_value(self, tag: str, hwc: np.ndarray):
        from PIL import Image
        import io
        pixels = _uint8(hwc)
        mode = {1: "L", 3: "RGB", 4: "RGBA"}[pixels.shape[2]]
        buffer = io.BytesIO()
        Image.fromarray(pixels[..., 0] if mode == "L" else pixels, mode).save(buffer, format="PNG")
        summary_pb2 = self._tb[2]
        return summary_pb2.Summary.Value(tag=tag, image=summary_pb2.Summary.Image(
            height=pixels.shape[0], width=pixels.shape[1], colorspace=pixels.shape[2],
            encoded_image_string=buffer.getvalue()))

    def add_image(self, tag: str, img_tensor, global_step=None, walltime=None, dataformats: str = "CHW") -> None:
        """One image: floats in [0, 1] (scaled by 255) or uint8, laid out as `dataformats`
        ('CHW', 'HWC', 'HW', ...; 1, 3 or 4 channels). Stored as PNG."""
        hwc = _to_hwc(_array(img_tensor, "add_image"), dataformats, "add_image")
        self._write([self._image_value(tag, hwc)], global_step, walltime, "add_image")

    def add_images(self, tag: str, img_tensor, global_step=None, walltime=None, dataformats: str = "NCHW") -> None:
        """A batch of images (`dataformats` 'NCHW', 'NHWC', 'NHW', ...) drawn as one grid image."""
        array = _array(img_tensor, "add_images")
        letters = dataformats.upper()
        if "N" not in letters or array.ndim != len(letters):
            raise ValueError(f"add_images: images of shape {array.shape} do not match dataformats {dataformats!r}")
        batch_axis = letters.index("N")
        array = np.moveaxis(array, batch_axis, 0)
        per_image = letters.replace("N", "")
        if array.shape[0] == 0:
            raise ValueError("add_images: the batch is empty")
        images = np.stack([_to_hwc(image, per_image, "add_images") for image in array])
        self._write([self._image_value(tag, _grid(images))], global_step, walltime, "add_images")

    def add_figure(self, tag: str, figure, global_step=None, close: bool = True, walltime=None) -> None:
        """A matplotlib figure (or a list of them, drawn side by side as a grid) as an image."""
        try:
            from matplotlib.backends.backend_agg import FigureCanvasAgg
        except ImportError as error:
            raise ImportError(f"add_figure needs matplotlib ({error}): pip install matplotlib") from None
        figures = list(figure) if isinstance(figure, (list, tuple)) else [figure]
        images = []
        for item in figures:
            canvas = FigureCanvasAgg(item)
            canvas.draw()
            images.append(np.asarray(canvas.buffer_rgba())[..., :4].copy())
            if close and "matplotlib.pyplot" in sys.modules:
                sys.modules["matplotlib.pyplot"].close(item)
        if len(images) == 1:
            self._write([self._image_value(tag, images[0])], global_step, walltime, "add_figure")
            return
        if len({image.shape for image in images}) != 1:
            raise ValueError("add_figure: figures of different sizes cannot share one grid")
        self._write([self._image_value(tag, _grid(np.stack(images)))], global_step, walltime, "add_figure")

    # ------------------------------------------------------------------ text and hparams

    def add_text(self, tag: str, text_string: str, global_step=None, walltime=None) -> None:
        """Text (Markdown) under ``<tag>/text_summary``, as torch writes it."""
        if not isinstance(text_string, str):
            raise ValueError(f"add_text: expected a str, got {type(text_string).__name__}")
        summary_pb2 = self._tb[2]
        proto = self._tensor("DT_STRING", (1,), string_val=[text_string.encode("utf-8")])
        self._write([summary_pb2.Summary.Value(tag=f"{tag}/text_summary", tensor=proto,
                                               metadata=self._plugin("text"))], global_step, walltime, "add_text")

    def add_hparams(self, hparam_dict: Mapping[str, Any], metric_dict: Mapping[str, Any],
                    hparam_domain_discrete: Mapping[str, Sequence] | None = None, run_name: str | None = None,
                    global_step=None) -> None:
        """One trial for TensorBoard's HParams tab: hyperparameters (int, float, str, bool or a
        one-element tensor) and final metrics, written to ``<log_dir>/<run_name>`` (default:
        the time), the metrics also as scalars there."""
        try:
            from tensorboard.plugins.hparams import api_pb2, metadata, plugin_data_pb2
        except ImportError as error:
            raise ImportError(f"add_hparams needs the tensorboard package ({error}); install it with {_EXTRA}") \
                from None
        from google.protobuf import struct_pb2
        if not isinstance(hparam_dict, Mapping) or not isinstance(metric_dict, Mapping):
            raise ValueError("add_hparams: hparam_dict and metric_dict must be dicts")
        self._check_open("add_hparams")
        domains = dict(hparam_domain_discrete or {})
        infos, values = [], {}
        for name, raw in hparam_dict.items():
            if isinstance(raw, bool):
                values[name], kind = struct_pb2.Value(bool_value=raw), api_pb2.DATA_TYPE_BOOL
            elif isinstance(raw, str):
                values[name], kind = struct_pb2.Value(string_value=raw), api_pb2.DATA_TYPE_STRING
            elif isinstance(raw, (int, float)):
                values[name], kind = struct_pb2.Value(number_value=float(raw)), api_pb2.DATA_TYPE_FLOAT64
            elif raw is not None and (hasattr(raw, "numpy") or isinstance(raw, (np.ndarray, np.generic))):
                values[name] = struct_pb2.Value(number_value=_scalar(raw, f"add_hparams[{name!r}]"))
                kind = api_pb2.DATA_TYPE_FLOAT64
            else:
                raise ValueError(f"add_hparams: hparam {name!r} is a {type(raw).__name__}; expected int, float, str, "
                                 "bool or a one-element tensor")
            info = api_pb2.HParamInfo(name=name, type=kind)
            if name in domains:
                choices = domains.pop(name)
                if not isinstance(choices, (list, tuple)) or not all(isinstance(c, type(raw)) for c in choices):
                    raise ValueError(f"add_hparams: hparam_domain_discrete[{name!r}] must be a list of values of "
                                     f"the hparam's type ({type(raw).__name__})")
                info.domain_discrete.extend(choices)
            infos.append(info)
        if domains:
            raise ValueError(f"add_hparams: hparam_domain_discrete names {sorted(domains)}, which hparam_dict "
                             "does not hold")
        metrics = {name: _scalar(value, f"add_hparams metric {name!r}") for name, value in metric_dict.items()}
        experiment = api_pb2.Experiment(hparam_infos=infos, metric_infos=[
            api_pb2.MetricInfo(name=api_pb2.MetricName(tag=name)) for name in metrics])
        start = plugin_data_pb2.SessionStartInfo(start_time_secs=time.time())
        for name, value in values.items():
            start.hparams[name].CopyFrom(value)
        end = plugin_data_pb2.SessionEndInfo(status=api_pb2.STATUS_SUCCESS)
        summary_pb2 = self._tb[2]
        entries = [
            summary_pb2.Summary.Value(tag=metadata.EXPERIMENT_TAG, tensor=metadata.NULL_TENSOR,
                                      metadata=metadata.create_summary_metadata(
                                          plugin_data_pb2.HParamsPluginData(experiment=experiment))),
            summary_pb2.Summary.Value(tag=metadata.SESSION_START_INFO_TAG, tensor=metadata.NULL_TENSOR,
                                      metadata=metadata.create_summary_metadata(
                                          plugin_data_pb2.HParamsPluginData(session_start_info=start))),
            summary_pb2.Summary.Value(tag=metadata.SESSION_END_INFO_TAG, tensor=metadata.NULL_TENSOR,
                                      metadata=metadata.create_summary_metadata(
                                          plugin_data_pb2.HParamsPluginData(session_end_info=end))),
        ]
        folder = os.path.join(self.log_dir, run_name if run_name is not None else str(time.time()))
        writer = self._open(folder, None)
        try:
            for entry in entries:
                self._write([entry], None, None, "add_hparams", writer)
            for name, value in metrics.items():
                self._write([summary_pb2.Summary.Value(tag=name, simple_value=value)], global_step, None,
                            "add_hparams", writer)
        finally:
            writer.close()

    def add_graph(self, model, input_to_model=None, verbose: bool = False, use_strict_trace: bool = True) -> None:
        """The graph of ``model(*input_to_model)`` for TensorBoard's Graphs tab: the forward is
        traced by `anygpu.onnx.export` (in eval mode; needs the extra anygpu[onnx]) and each
        ONNX node becomes a node, grouped under the module whose parameters it reads. Without
        the onnx package, or for a forward the exporter cannot trace, it warns and writes
        nothing (a logging call does not stop a training script)."""
        self._check_open("add_graph")
        try:
            from anygpu import onnx as exporter
            exporter._require_onnx()
        except ImportError as error:
            warnings.warn(f"SummaryWriter.add_graph writes nothing: {error}", stacklevel=2)
            return
        inputs = () if input_to_model is None else input_to_model
        try:
            proto = exporter.export(model, inputs if isinstance(inputs, tuple) else (inputs,), None)
        except (exporter.UnsupportedOperatorError, ValueError, TypeError) as error:
            warnings.warn(f"SummaryWriter.add_graph writes nothing: the forward could not be traced ({error})",
                          stacklevel=2)
            return
        state = model.state_dict() if hasattr(model, "state_dict") else {}
        graph = _graph_def(proto.graph, set(state))
        if verbose:
            print(graph)
        event_pb2 = self._tb[1]
        self._writer.add_event(event_pb2.Event(graph_def=graph.SerializeToString(), wall_time=time.time()))

    # ------------------------------------------------------------------ lifetime

    def _writers(self) -> list:
        return [self._writer, *self._scalar_writers.values()]

    def flush(self) -> None:
        """Write every queued event to disk."""
        if self._closed:
            return
        for writer in self._writers():
            writer.flush()

    def close(self) -> None:
        """Flush and close the event files; later add_* calls raise ValueError. Closing twice is fine."""
        if self._closed:
            return
        for writer in self._writers():
            writer.flush()
            writer.close()
        self._closed = True

    def __enter__(self) -> "SummaryWriter":
        return self

    def __exit__(self, *exc_info) -> None:
        self.close()

    def __del__(self):  # an unclosed writer still gets its queued events out
        try:
            if not getattr(self, "_closed", True):
                self.close()
        except Exception:  # noqa: BLE001 — interpreter shutdown: nothing left to report to
            pass
