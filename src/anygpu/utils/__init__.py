"""torch.utils for anygpu: `anygpu.utils.data` (Dataset, DataLoader, samplers) and
`anygpu.utils.checkpoint` (recompute in backward instead of keeping activations)."""

from . import checkpoint, data

__all__ = ["checkpoint", "data"]
