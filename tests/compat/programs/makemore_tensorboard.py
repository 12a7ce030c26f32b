"""A makemore-style character MLP (embedding, tanh layer, cross-entropy, SGD) that logs to
TensorBoard with torch.utils.tensorboard's SummaryWriter (scalars, a histogram, an image,
text, hparams), then reads its own event files back with TensorBoard's reader and prints
what they hold."""

import os
import tempfile

import torch
import torch.nn as nn
import torch.nn.functional as F
from shared_init import share_initial_weights
from tensorboard.backend.event_processing.event_accumulator import EventAccumulator
from torch.utils.tensorboard import SummaryWriter

words = ["emma", "olivia", "ava", "isabella", "sophia", "mia", "charlotte", "amelia", "harper", "evelyn"]
chars = sorted(set("".join(words)))
stoi = {ch: i + 1 for i, ch in enumerate(chars)}
stoi["."] = 0
block = 3
xs, ys = [], []
for word in words:
    context = [0] * block
    for ch in word + ".":
        xs.append(context)
        ys.append(stoi[ch])
        context = context[1:] + [stoi[ch]]
X, Y = torch.tensor(xs), torch.tensor(ys)


class MLP(nn.Module):
    def __init__(self):
        super().__init__()
        self.emb = nn.Embedding(len(stoi), 8)
        self.hidden = nn.Linear(block * 8, 32)
        self.out = nn.Linear(32, len(stoi))

    def forward(self, x):
        return self.out(torch.tanh(self.hidden(self.emb(x).view(x.shape[0], -1))))


model = MLP()
share_initial_weights(model)
optimizer = torch.optim.SGD(model.parameters(), lr=0.2)
logdir = tempfile.mkdtemp()
with SummaryWriter(logdir) as writer:
    for step in range(40):
        loss = F.cross_entropy(model(X), Y)
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        writer.add_scalar("loss/train", loss.item(), step)
        if step % 10 == 0:
            writer.add_histogram("emb", model.emb.weight, step)
    with torch.no_grad():
        weight = model.emb.weight
        writer.add_image("emb_image", (weight - weight.min()) / (weight.max() - weight.min()), 40, dataformats="HW")
    writer.add_text("note", f"{len(words)} words, {X.shape[0]} examples", 40)
    writer.add_hparams({"lr": 0.2, "block": block}, {"final_loss": loss.item()}, run_name="hparams")

events = EventAccumulator(logdir)
events.Reload()
tags = events.Tags()
print("scalars", tags["scalars"], "histograms", tags["histograms"], "images", tags["images"])
print("tensors", tags["tensors"])
losses = events.Scalars("loss/train")
print(len(losses), "losses, steps", losses[0].step, "to", losses[-1].step)
print(f"first {losses[0].value:.4f} last {losses[-1].value:.4f}")
for event in events.Histograms("emb"):
    histogram = event.histogram_value
    print(f"emb at {event.step}: {histogram.num:.0f} values in [{histogram.min:.4f}, {histogram.max:.4f}], "
          f"sum {histogram.sum:.4f}")
image = events.Images("emb_image")[0]
print("image", image.width, "x", image.height, "at", image.step)
print("note", events.Tensors("note/text_summary")[0].tensor_proto.string_val[0].decode())
hparams = EventAccumulator(os.path.join(logdir, "hparams"))
hparams.Reload()
print(f"final_loss {hparams.Scalars('final_loss')[0].value:.4f}")
