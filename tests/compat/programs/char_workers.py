"""A character-level model trained the way makemore and minGPT feed it: a Dataset whose
__getitem__ builds torch tensors, an "infinite" loader over RandomSampler(replacement=True,
num_samples=int(1e10)), two worker processes (persistent, with a worker_init_fn), and a
second loader of whole epochs with workers for evaluation. Synthetic words keep it small."""

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F
from torch.utils.data import DataLoader, Dataset

from shared_init import share_initial_weights

BLOCK = 6


class CharDataset(Dataset):
    def __init__(self, words, chars):
        self.words = words
        self.stoi = {ch: i + 1 for i, ch in enumerate(chars)}

    def __len__(self):
        return len(self.words)

    def __getitem__(self, idx):
        ix = torch.tensor([self.stoi[ch] for ch in self.words[idx]], dtype=torch.long)
        x = torch.zeros(BLOCK + 1, dtype=torch.long)
        y = torch.zeros(BLOCK + 1, dtype=torch.long)
        x[1:1 + len(ix)] = ix
        y[:len(ix)] = ix
        y[len(ix) + 1:] = -1  # ignored by the loss
        return x, y


class InfiniteDataLoader:
    """makemore's loader: sample with replacement forever."""

    def __init__(self, dataset, generator, **kwargs):
        sampler = torch.utils.data.RandomSampler(dataset, replacement=True, num_samples=int(1e10),
                                                 generator=generator)
        self.train_loader = DataLoader(dataset, sampler=sampler, **kwargs)
        self.data_iter = iter(self.train_loader)

    def next(self):
        try:
            batch = next(self.data_iter)
        except StopIteration:
            self.data_iter = iter(self.train_loader)
            batch = next(self.data_iter)
        return batch


class Bigram(nn.Module):
    def __init__(self, vocab):
        super().__init__()
        self.embed = nn.Embedding(vocab, 16)
        self.head = nn.Linear(16, vocab)

    def forward(self, idx, targets=None):
        logits = self.head(torch.tanh(self.embed(idx)))
        loss = None
        if targets is not None:
            loss = F.cross_entropy(logits.view(-1, logits.size(-1)), targets.view(-1), ignore_index=-1)
        return logits, loss


def seed_worker(worker_id):
    info = torch.utils.data.get_worker_info()
    assert info is not None and info.id == worker_id and info.num_workers == 2


def main():
    torch.manual_seed(0)
    rng = np.random.default_rng(3)
    chars = "abcdefgh"
    words = ["".join(rng.choice(list(chars), size=rng.integers(2, BLOCK))) for _ in range(200)]
    dataset = CharDataset(words, chars)
    model = Bigram(len(chars) + 1)
    share_initial_weights(model)
    optimizer = torch.optim.AdamW(model.parameters(), lr=5e-2, weight_decay=0.01)
    loader = InfiniteDataLoader(dataset, torch.Generator().manual_seed(7), batch_size=16, pin_memory=True,
                                num_workers=2, persistent_workers=True, worker_init_fn=seed_worker)
    print("batches", len(loader.train_loader))
    for step in range(12):
        x, y = loader.next()
        _, loss = model(x, y)
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        optimizer.step()
        print(f"step {step} x {x.shape[0]}x{x.shape[1]} loss {loss.item():.5f}")
    evaluation = DataLoader(dataset, batch_size=50, num_workers=2)
    with torch.no_grad():
        losses = [model(x, y)[1].item() for x, y in evaluation]
    print("eval", len(losses), f"{sum(losses) / len(losses):.5f}")


if __name__ == "__main__":
    main()
