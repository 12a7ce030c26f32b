"""torch.utils.tensorboard for anygpu: `SummaryWriter` writes TensorBoard event files.

The files are written by the ``tensorboard`` package's own event-file writer and protocol
buffers (extra ``anygpu[tensorboard]``; importing this module does not need it, making a
`SummaryWriter` does). Values may be anygpu Tensors, NumPy arrays, Python numbers or any
object with ``.numpy()``.
"""

from anygpu.utils.tensorboard.writer import SummaryWriter

__all__ = ["SummaryWriter"]
