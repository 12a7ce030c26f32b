"""Sequence models in the style of ordinary PyTorch scripts: a bidirectional GRU classifier
over variable-length sequences (padding, packing, BCEWithLogitsLoss with pos_weight,
RMSprop, ReduceLROnPlateau), a Transformer encoder-decoder learning to reverse sequences
(key padding and causal masks, label-smoothed cross entropy with ignore_index, NAdam,
OneCycleLR, gradient clipping, greedy decoding) and an LSTMCell regressor (SmoothL1Loss,
Adagrad, MultiStepLR)."""

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F
from torch.nn.utils.rnn import pack_padded_sequence, pad_packed_sequence, pad_sequence

from shared_init import share_initial_weights

PAD, BOS, VOCAB = 0, 1, 12


class GRUClassifier(nn.Module):
    def __init__(self, vocab, emb, hidden):
        super().__init__()
        self.embedding = nn.Embedding(vocab, emb, padding_idx=PAD)
        self.gru = nn.GRU(emb, hidden, num_layers=2, batch_first=True, bidirectional=True)
        self.head = nn.Sequential(nn.Linear(4 * hidden, hidden), nn.LeakyReLU(0.1), nn.Linear(hidden, 1))

    def forward(self, tokens, lengths):
        packed = pack_padded_sequence(self.embedding(tokens), lengths, batch_first=True, enforce_sorted=False)
        output, h_n = self.gru(packed)
        padded, _ = pad_packed_sequence(output, batch_first=True)
        mean = padded.sum(dim=1) / lengths.unsqueeze(1).float()
        return self.head(torch.cat([h_n[-2], h_n[-1], mean[:, :h_n.size(2)], mean[:, h_n.size(2):]], dim=1))


class Reverser(nn.Module):
    def __init__(self, vocab, d_model, max_len=16):
        super().__init__()
        self.embed = nn.Embedding(vocab, d_model)
        self.pos = nn.Parameter(torch.zeros(1, max_len, d_model))
        self.transformer = nn.Transformer(d_model=d_model, nhead=2, num_encoder_layers=2, num_decoder_layers=1,
                                          dim_feedforward=32, dropout=0.0, batch_first=True, activation="gelu")
        self.out = nn.Linear(d_model, vocab)

    def forward(self, src, tgt):
        tgt_mask = nn.Transformer.generate_square_subsequent_mask(tgt.size(1))
        hidden = self.transformer(self.embed(src) + self.pos[:, :src.size(1)],
                                  self.embed(tgt) + self.pos[:, :tgt.size(1)], tgt_mask=tgt_mask,
                                  src_key_padding_mask=src == PAD, tgt_key_padding_mask=tgt == PAD,
                                  memory_key_padding_mask=src == PAD)
        return self.out(hidden)


class CellRegressor(nn.Module):
    def __init__(self, hidden):
        super().__init__()
        self.cell = nn.LSTMCell(1, hidden)
        self.out = nn.Linear(hidden, 1)

    def forward(self, x):
        h = c = None
        outputs = []
        for t in range(x.size(1)):
            h, c = self.cell(x[:, t], None if h is None else (h, c))
            outputs.append(self.out(h))
        return torch.stack(outputs, dim=1)


def classifier_data(rng, n):
    seqs, labels = [], []
    for _ in range(n):
        length = int(rng.integers(2, 9))
        seq = rng.integers(2, VOCAB, size=length)
        seqs.append(torch.tensor(seq, dtype=torch.long))
        labels.append(float((seq > 7).sum() > length / 3))
    lengths = torch.tensor([len(s) for s in seqs])
    return pad_sequence(seqs, batch_first=True, padding_value=PAD), lengths, torch.tensor(labels).unsqueeze(1)


def reverse_batch(rng, n):
    src, tgt_in, tgt_out = [], [], []
    for _ in range(n):
        seq = [int(v) for v in rng.integers(2, VOCAB, size=int(rng.integers(3, 7)))]
        src.append(torch.tensor(seq))
        tgt_in.append(torch.tensor([BOS] + seq[::-1]))
        tgt_out.append(torch.tensor(seq[::-1] + [PAD]))
    pad = lambda seqs: pad_sequence(seqs, batch_first=True, padding_value=PAD)  # noqa: E731
    return pad(src), pad(tgt_in), pad(tgt_out)


def main():
    torch.manual_seed(0)
    rng = np.random.default_rng(5)
    models = nn.ModuleDict({"gru": GRUClassifier(VOCAB, 8, 6), "reverser": Reverser(VOCAB, 16),
                            "cell": CellRegressor(5)})
    share_initial_weights(models)
    gru, reverser, cell = models["gru"], models["reverser"], models["cell"]

    # 1. bidirectional GRU over packed variable-length sequences
    tokens, lengths, labels = classifier_data(rng, 24)
    val_tokens, val_lengths, val_labels = classifier_data(rng, 12)
    criterion = nn.BCEWithLogitsLoss(pos_weight=torch.tensor([1.5]))
    optimizer = torch.optim.RMSprop(gru.parameters(), lr=0.01, momentum=0.5, centered=True)
    scheduler = torch.optim.lr_scheduler.ReduceLROnPlateau(optimizer, factor=0.5, patience=0)
    for epoch in range(4):
        gru.train()
        for start in range(0, 24, 8):
            optimizer.zero_grad()
            loss = criterion(gru(tokens[start:start + 8], lengths[start:start + 8]), labels[start:start + 8])
            loss.backward()
            optimizer.step()
        gru.eval()
        with torch.no_grad():
            logits = gru(val_tokens, val_lengths)
            val_loss = criterion(logits, val_labels).item()
            correct = ((logits > 0).float() == val_labels).sum().item()
        scheduler.step(val_loss)
        print(f"gru epoch {epoch} train {loss.item():.6f} val {val_loss:.6f} correct {correct}/12 "
              f"lr {optimizer.param_groups[0]['lr']:.5f}")

    # 2. Transformer learning to reverse sequences
    criterion = nn.CrossEntropyLoss(ignore_index=PAD, label_smoothing=0.1)
    optimizer = torch.optim.NAdam(reverser.parameters(), lr=3e-3, weight_decay=1e-4)
    steps = 30
    scheduler = torch.optim.lr_scheduler.OneCycleLR(optimizer, max_lr=2e-2, total_steps=steps, pct_start=0.25)
    reverser.train()
    for step in range(steps):
        src, tgt_in, tgt_out = reverse_batch(rng, 6)
        logits = reverser(src, tgt_in)
        loss = criterion(logits.reshape(-1, VOCAB), tgt_out.reshape(-1))
        optimizer.zero_grad()
        loss.backward()
        norm = torch.nn.utils.clip_grad_norm_(reverser.parameters(), 1.0)
        optimizer.step()
        scheduler.step()
        if step % 6 == 0:
            print(f"reverse step {step} loss {loss.item():.6f} grad norm {norm.item():.5f} "
                  f"lr {scheduler.get_last_lr()[0]:.6f} beta1 {optimizer.param_groups[0]['betas'][0]:.5f}")
    reverser.eval()
    src, _, _ = reverse_batch(rng, 2)
    with torch.no_grad():
        out = torch.full((2, 1), BOS, dtype=torch.long)
        for _ in range(src.size(1)):
            next_logits = reverser(src, out)[:, -1]
            out = torch.cat([out, next_logits.argmax(dim=-1, keepdim=True)], dim=1)
        top2 = F.softmax(reverser(src, out[:, :-1]), dim=-1).topk(2, dim=-1).values
    print("source", src.tolist())
    print("decoded", out[:, 1:].tolist(), "smallest top-2 margin", f"{(top2[..., 0] - top2[..., 1]).min().item():.5f}")

    # 3. LSTMCell regressor on a noisy sine
    t = np.linspace(0, 3, 10, dtype=np.float32)
    phases = rng.uniform(0, 3, size=(8, 1)).astype(np.float32)
    x = torch.tensor(np.sin(t[None, :] + phases)[..., None])
    y = torch.tensor(np.cos(t[None, :] + phases)[..., None])
    optimizer = torch.optim.Adagrad(cell.parameters(), lr=0.1, lr_decay=0.01)
    scheduler = torch.optim.lr_scheduler.MultiStepLR(optimizer, milestones=[2, 4], gamma=0.5)
    loss_fn = nn.SmoothL1Loss(beta=0.5)
    for epoch in range(6):
        optimizer.zero_grad()
        loss = loss_fn(cell(x), y)
        loss.backward()
        torch.nn.utils.clip_grad_value_(cell.parameters(), 0.5)
        optimizer.step()
        scheduler.step()
        print(f"cell epoch {epoch} loss {loss.item():.6f} lr {scheduler.get_last_lr()[0]:.4f}")
    total = sum(p.numel() for p in models.parameters())
    print("parameters", total, "vector norm", f"{torch.nn.utils.parameters_to_vector(models.parameters()).norm():.4f}")


if __name__ == "__main__":
    main()
