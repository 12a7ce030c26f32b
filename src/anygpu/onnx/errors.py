"""torch.onnx.errors: what a failed export raises (ValueErrors, as anygpu's other bad-input errors)."""

from __future__ import annotations

__all__ = ["OnnxExporterError", "UnsupportedOperatorError"]


class OnnxExporterError(ValueError):
    """An export that cannot be done (bad arguments to export are plain ValueErrors)."""


class UnsupportedOperatorError(OnnxExporterError):
    """An op the forward ran has no ONNX mapping (its name is in the message)."""
