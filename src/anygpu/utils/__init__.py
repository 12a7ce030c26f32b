"""torch.utils for anygpu: `anygpu.utils.data` (Dataset, DataLoader, samplers),
`anygpu.utils.checkpoint` (recompute in backward instead of keeping activations) and
`anygpu.utils.tensorboard` (SummaryWriter; needs the extra anygpu[tensorboard] when used) and
`anygpu.utils.deterministic` (fill_uninitialized_memory)."""

from . import checkpoint, data, deterministic, tensorboard

__all__ = ["checkpoint", "data", "deterministic", "tensorboard"]
