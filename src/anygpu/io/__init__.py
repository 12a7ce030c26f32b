"""Files: NanoSign integrity trailers and signed safetensors checkpoints."""

from anygpu.io import nanosign
from anygpu.io.checkpoint import load, load_with_metadata, save
from anygpu.io.nanosign import TamperedError, VerifyResult

__all__ = ["nanosign", "save", "load", "load_with_metadata", "TamperedError", "VerifyResult"]
