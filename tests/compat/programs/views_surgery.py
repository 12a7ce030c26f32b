"""Writes through views, as torch programs make them: weight surgery on slices of .data
(`w.data[:, :k].copy_(v)`, `b.data[::2].zero_()`), nn.init on a row and a column,
in-place ops on views of activations inside the graph (`h.narrow(1, 0, 4).sigmoid_()`,
`x[:, 0].zero_()`, a slice assignment), views through transpose/reshape/unbind, a
hand-written loss with `logits[range(n), y]`, and WGAN-style clipping through .data."""

import numpy as np
import torch
import torch.nn as nn

from shared_init import share_initial_weights

rng = np.random.default_rng(3)
X = torch.tensor(rng.standard_normal((64, 10)).astype(np.float32))
Y = torch.tensor(rng.integers(0, 5, size=64))


class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc1 = nn.Linear(10, 12)
        self.fc2 = nn.Linear(12, 12)
        self.out = nn.Linear(12, 5)

    def forward(self, x):
        x = x.clone()
        x[:, 0].zero_()  # a column of the batch, in place through a view
        h = self.fc1(x)
        h.narrow(1, 0, 4).sigmoid_()  # in place on a view of a graph value (torch's CopySlices)
        h = h.tanh()
        h = h.view(h.shape[0], 3, 4).transpose(1, 2).reshape(h.shape[0], 12)  # views, then a copy
        first, second = h.chunk(2, dim=1)
        h = torch.cat([second, first], dim=1)
        h = self.fc2(h)
        h[:, 6:] = h[:, 6:] * 0.5  # a slice assignment recorded in the graph
        h = h.relu()
        rows = h.unbind(0)
        return self.out(torch.stack(rows[::-1], 0)).flip(0)


model = Net()
share_initial_weights(model)
with torch.no_grad():  # weight surgery through views of the parameters
    patch = torch.tensor(rng.standard_normal((12, 3)).astype(np.float32)) * 0.1
    model.fc1.weight.data[:, :3].copy_(patch)
    model.fc1.bias.data[::2].zero_()
    nn.init.constant_(model.fc2.weight[0], 0.05)
    nn.init.zeros_(model.fc2.weight.data[:, 11])
    model.out.weight[1:3].mul_(-1.0)
    diag = model.fc2.weight.diagonal()
    diag.add_(0.25)  # the diagonal view writes the weight
    model.fc2.weight.t()[2].fill_(0.01)  # column 2, through a transpose
    print(f"surgery {model.fc1.weight.sum().item():.5f} {model.fc2.weight.sum().item():.5f} "
          f"{model.out.weight.sum().item():.5f} {diag.sum().item():.5f}")

optimizer = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.5)
n = X.shape[0]
for step in range(30):
    logits = model(X)
    log_probs = logits.log_softmax(dim=1)
    loss = -log_probs[range(n), Y].mean()  # the hand-written cross entropy
    optimizer.zero_grad()
    loss.backward()
    optimizer.step()
    for p in model.parameters():
        p.data.clamp_(-0.8, 0.8)  # clipping through .data writes the parameter
    if step % 5 == 4:
        print(f"step {step + 1} loss {loss.item():.5f}")

with torch.no_grad():
    scores = model(X)
    best = scores.max()
    marked = scores.clone()
    marked[range(n), Y] = best  # the one-hot trick
    accuracy = (scores.argmax(1) == Y).float().mean().item()
print(f"marked {marked.sum().item():.4f} accuracy {accuracy:.4f}")
