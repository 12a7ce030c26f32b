"""torch.utils for anygpu: `anygpu.utils.data` (Dataset, DataLoader, samplers),
`anygpu.utils.checkpoint` (recompute in backward instead of keeping activations) and
`anygpu.utils.tensorboard` (SummaryWriter; needs the extra anygpu[tensorboard] when used)."""

from . import checkpoint, data, tensorboard

__all__ = ["checkpoint", "data", "tensorboard"]
