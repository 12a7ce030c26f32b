"""float64 as the default dtype, with views: torch.set_default_dtype(torch.float64) makes
Python floats, factories and new Modules float64; a Vandermonde design matrix is filled
column by column through slice assignment (views of one tensor); a Linear fits it with
Adam, its weight edited through .data slices; promotion rules between float64 and float32
tensors and 0-d tensors; precision a float32 run would lose (1e8 + small terms)."""

import numpy as np
import torch
import torch.nn as nn

from shared_init import share_initial_weights

torch.set_default_dtype(torch.float64)
print("default", torch.get_default_dtype(), torch.tensor([1.5]).dtype, torch.zeros(2).dtype,
      torch.arange(0.0, 1.0, 0.25).dtype, torch.arange(3).dtype)

rng = np.random.default_rng(11)
xs = torch.tensor(rng.uniform(-1.0, 1.0, 50))
degree = 6
design = torch.ones(50, degree + 1)
for k in range(1, degree + 1):
    design[:, k] = design[:, k - 1] * xs  # a column written through a view
coeffs = torch.tensor([0.5, -1.0, 0.25, 2.0, 0.0, -0.75, 0.1])
ys = design @ coeffs + 1e-3 * torch.tensor(rng.standard_normal(50))
print("design", design.dtype, f"{design.sum().item():.12f}", design.stride(), design[:, 3].is_contiguous())

model = nn.Linear(degree + 1, 1, bias=False)
share_initial_weights(model)
with torch.no_grad():
    model.weight.data[:, :2].copy_(torch.tensor([[0.1, 0.2]]))  # surgery on a slice of .data
    model.weight[0, -1].zero_()
print("weight", model.weight.dtype, f"{model.weight.sum().item():.12f}")

optimizer = torch.optim.Adam(model.parameters(), lr=0.05)
for step in range(60):
    optimizer.zero_grad()
    loss = ((model(design).squeeze(1) - ys) ** 2).mean()
    loss.backward()
    optimizer.step()
    if step % 10 == 0:
        print(f"step {step} loss {loss.item():.12f}")

big = torch.tensor([1e8, 1.0, -1e8, 1e-8])
print("sum", f"{big.sum().item():.12g}", "float32 sum", f"{big.float().sum().item():.6g}")
f32 = torch.ones(3, dtype=torch.float32)
print("promotion", (f32 + torch.ones(3)).dtype, (f32 * torch.tensor(2.0)).dtype, (f32 * 2.5).dtype,
      (torch.ones(3) + 1).dtype, (torch.arange(3) * 0.5).dtype, (torch.arange(3) / 2).dtype)
print("exp", f"{torch.exp(torch.tensor(1.0)).item():.15f}", f"{torch.tensor(2.0).sqrt().item():.15f}")
