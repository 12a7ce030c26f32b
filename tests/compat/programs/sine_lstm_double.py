"""float64 end to end, the way time-series examples are written: NumPy float64 data through
torch.from_numpy (float64, as torch gives), slices of it as inputs and targets (views),
two LSTMCells and a Linear converted with .double(), zeros(dtype=torch.double) states,
the sequence walked with split(1, dim=1), LBFGS with a closure, then a no_grad rollout
into the future. Losses print with 10 digits: float64 runs agree far below that."""

import numpy as np
import torch
import torch.nn as nn

from shared_init import share_initial_weights

rng = np.random.default_rng(5)
T, L, N, H = 8, 40, 10, 12
x = np.arange(L)[None, :] + rng.integers(-4 * T, 4 * T, N)[:, None]
data = np.sin(x / 1.0 / T).astype("float64")

inputs = torch.from_numpy(data[2:, :-1])
targets = torch.from_numpy(data[2:, 1:])
test_input = torch.from_numpy(data[:2, :-1])
test_target = torch.from_numpy(data[:2, 1:])
print("dtypes", inputs.dtype, targets.dtype, tuple(inputs.shape), inputs[:, 1:].is_contiguous())


class Sequence(nn.Module):
    def __init__(self):
        super().__init__()
        self.cell1 = nn.LSTMCell(1, H)
        self.cell2 = nn.LSTMCell(H, H)
        self.head = nn.Linear(H, 1)

    def forward(self, seq, future=0):
        outputs = []
        h1 = torch.zeros(seq.size(0), H, dtype=torch.double)
        c1 = torch.zeros(seq.size(0), H, dtype=torch.double)
        h2 = torch.zeros(seq.size(0), H, dtype=torch.double)
        c2 = torch.zeros(seq.size(0), H, dtype=torch.double)
        out = None
        for column in seq.split(1, dim=1):
            h1, c1 = self.cell1(column, (h1, c1))
            h2, c2 = self.cell2(h1, (h2, c2))
            out = self.head(h2)
            outputs.append(out)
        for _ in range(future):
            h1, c1 = self.cell1(out, (h1, c1))
            h2, c2 = self.cell2(h1, (h2, c2))
            out = self.head(h2)
            outputs.append(out)
        return torch.cat(outputs, dim=1)


model = Sequence()
model.double()
share_initial_weights(model)
print("parameter dtypes", sorted({str(p.dtype) for p in model.parameters()}))
criterion = nn.MSELoss()
optimizer = torch.optim.LBFGS(model.parameters(), lr=0.8, max_iter=6)
for step in range(3):
    def closure():
        optimizer.zero_grad()
        loss = criterion(model(inputs), targets)
        print(f"loss {loss.item():.10f}")
        loss.backward()
        return loss
    optimizer.step(closure)
    with torch.no_grad():
        future = 15
        pred = model(test_input, future=future)
        test_loss = criterion(pred[:, :-future], test_target)
        print(f"step {step} test loss {test_loss.item():.10f} prediction {pred[:, -1].sum().item():.10f}")
print("gradient norm", f"{sum(p.grad.double().pow(2).sum() for p in model.parameters()).sqrt().item():.8f}")
