"""The PyTorch tutorial's polynomial fit with raw tensors and autograd: weights as leaf
tensors with requires_grad, a manual update under torch.no_grad() (in-place on leaves),
grad zeroing, then the same with nn.Sequential + MSELoss + optim.SGD. No shared init
needed: the weights are made from fixed numbers."""

import math

import torch

dtype = torch.float
x = torch.linspace(-math.pi, math.pi, 200, dtype=dtype)
y = torch.sin(x)

a = torch.tensor(0.1, dtype=dtype, requires_grad=True)
b = torch.tensor(-0.2, dtype=dtype, requires_grad=True)
c = torch.tensor(0.3, dtype=dtype, requires_grad=True)
d = torch.tensor(0.05, dtype=dtype, requires_grad=True)

learning_rate = 1e-6
for t in range(300):
    y_pred = a + b * x + c * x ** 2 + d * x ** 3
    loss = (y_pred - y).pow(2).sum()
    if t % 50 == 49:
        print(t, f"{loss.item():.5f}")
    loss.backward()
    with torch.no_grad():
        a -= learning_rate * a.grad
        b -= learning_rate * b.grad
        c -= learning_rate * c.grad
        d -= learning_rate * d.grad
        a.grad = None
        b.grad = None
        c.grad = None
        d.grad = None
print(f'Result: y = {a.item():.6f} + {b.item():.6f} x + {c.item():.6f} x^2 + {d.item():.6f} x^3')

p = torch.tensor([1, 2, 3])
xx = x.unsqueeze(-1).pow(p)
model = torch.nn.Sequential(torch.nn.Linear(3, 1), torch.nn.Flatten(0, 1))
with torch.no_grad():
    model[0].weight.copy_(torch.tensor([[0.5, -0.1, 0.02]]))
    model[0].bias.fill_(0.1)
loss_fn = torch.nn.MSELoss(reduction='sum')
optimizer = torch.optim.SGD(model.parameters(), lr=1e-6, momentum=0.9)
for t in range(200):
    y_pred = model(xx)
    loss = loss_fn(y_pred, y)
    if t % 50 == 49:
        print(t, f"{loss.item():.5f}")
    optimizer.zero_grad()
    loss.backward()
    optimizer.step()
linear_layer = model[0]
print(f'Result: y = {linear_layer.bias.item():.6f} + {linear_layer.weight[:, 0].item():.6f} x + '
      f'{linear_layer.weight[:, 1].item():.6f} x^2 + {linear_layer.weight[:, 2].item():.6f} x^3')
