"""torch.utils for anygpu: `anygpu.utils.data` (Dataset, DataLoader, samplers)."""

from . import data

__all__ = ["data"]
