"""torch.utils.data on anygpu: datasets, samplers, collation and DataLoader. No torch needed.

`from anygpu.utils.data import DataLoader, TensorDataset` reads like torch; see
docs/PYTORCH.md ("Data loading") for what differs.
"""

from .collate import default_collate, default_convert
from .dataloader import DataLoader
from .worker import WorkerInfo, get_worker_info
from .distributed import DistributedSampler
from .dataset import (
    ChainDataset, ConcatDataset, Dataset, IterableDataset, Subset, TensorDataset, random_split,
)
from .sampler import (
    BatchSampler, RandomSampler, Sampler, SequentialSampler, SubsetRandomSampler, WeightedRandomSampler,
)

__all__ = [
    "Dataset", "IterableDataset", "TensorDataset", "Subset", "ConcatDataset", "ChainDataset", "random_split",
    "Sampler", "SequentialSampler", "RandomSampler", "SubsetRandomSampler", "WeightedRandomSampler",
    "BatchSampler", "DistributedSampler", "DataLoader", "default_collate", "default_convert", "get_worker_info",
    "WorkerInfo",
]
