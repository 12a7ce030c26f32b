"""``anygpu export MODEL.safetensors OUT.onnx``: a model file ``anygpu train`` wrote, as ONNX.

The model file describes itself (``anygpu.train.modelfile``): its architecture rebuilds the
network, its input shape gives the traced input. Classifiers export ``image`` (N, C, H, W),
already standardized as the file's ``preprocess`` says, -> ``logits`` (N, classes); diffusion
models export ``x_t`` (N, C, H, W) and ``time_features`` (N, width) (the sinusoidal features
of the timestep) -> ``noise`` (N, C, H, W). The batch dim is dynamic. The file's own
entries (stratagem, classes, preprocess, diffusion schedule) are copied into the ONNX
model's metadata_props, so the ONNX file too says what its inputs mean.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

__all__ = ["register", "run"]


def register(subparsers: argparse._SubParsersAction) -> None:
    """Add ``export`` to the ``anygpu`` command."""
    parser = subparsers.add_parser(
        "export", help="write a model trained by 'anygpu train' as an ONNX file",
        description="Write a model.safetensors written by 'anygpu train' (its NanoSign signature is checked) "
                    "as an ONNX model with a dynamic batch dim, for onnxruntime and other ONNX runtimes. "
                    "Needs the onnx package: pip install 'anygpu[onnx]'. Exit 1: the model fails its NanoSign "
                    "check; 2: bad arguments, a file that is not an anygpu model, an op with no ONNX mapping.",
    )
    parser.add_argument("model", type=Path, metavar="MODEL", help="a model.safetensors written by anygpu train")
    parser.add_argument("out", type=Path, metavar="OUT", help="the ONNX file to write (replaced atomically)")
    parser.add_argument("--opset", type=int, default=17, metavar="N", help="ONNX opset version (default 17)")
    from anygpu.infer import _guarded  # a failed signature is exit 1, as for predict, eval and sample

    parser.set_defaults(func=_guarded(run))


def run(args: argparse.Namespace) -> int:
    """The ``anygpu export`` command."""
    import numpy as np

    import anygpu as ag
    from anygpu.io.nanosign import atomic_write_bytes
    from anygpu.train import modelfile

    from . import _require_onnx, export

    try:
        onnx = _require_onnx()
    except ModuleNotFoundError as error:  # one line on stderr, exit 2, as the CLI's other errors
        raise ValueError(str(error)) from None
    model = modelfile.read(args.model)
    network = model.build()
    image = ag.tensor(np.random.default_rng(0).standard_normal((2, *model.input_shape)).astype(np.float32))
    if model.is_classifier:
        inputs, names, outputs = (image,), ["image"], ["logits"]
    else:
        from anygpu.train.diffusion import sinusoidal_embedding
        features = ag.tensor(sinusoidal_embedding(np.array([1, 2]), int(model.architecture["width"])))
        inputs, names, outputs = (image, features), ["x_t", "time_features"], ["noise"]
    batch = {name: {0: "batch"} for name in names + outputs}
    proto = export(network, inputs, None, input_names=names, output_names=outputs, dynamic_axes=batch,
                   opset_version=args.opset)
    entries = {"stratagem": model.stratagem, "architecture": model.architecture,
               "input_shape": list(model.input_shape), "preprocess": model.preprocess}
    if model.classes:
        entries["classes"] = model.classes
    if model.diffusion:
        entries["diffusion"] = model.diffusion
    onnx.helper.set_model_props(proto, {key: json.dumps(value, sort_keys=True) for key, value in entries.items()})
    atomic_write_bytes(args.out, proto.SerializeToString())
    shapes = ", ".join(f"{name} (batch, {', '.join(str(s) for s in t.shape[1:])})" for name, t in zip(names, inputs))
    print(f"wrote {args.out}: {shapes} -> {', '.join(outputs)}, opset {args.opset}")
    return 0
