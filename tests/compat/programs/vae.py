"""A VAE in the style of PyTorch's VAE example: fc encoder to (mu, logvar),
reparameterisation, sigmoid decoder, BCE(sum) + KL loss, Adam, a test pass.
The reparameterisation noise comes from a seeded numpy generator (torch.from_numpy) in
place of randn_like: the two runs' random streams differ, the program must not."""

import numpy as np
import torch
from torch import nn, optim
from torch.nn import functional as F

from shared_init import share_initial_weights

noise_rng = np.random.default_rng(7)


class VAE(nn.Module):
    def __init__(self):
        super(VAE, self).__init__()
        self.fc1 = nn.Linear(64, 32)
        self.fc21 = nn.Linear(32, 4)
        self.fc22 = nn.Linear(32, 4)
        self.fc3 = nn.Linear(4, 32)
        self.fc4 = nn.Linear(32, 64)

    def encode(self, x):
        h1 = F.relu(self.fc1(x))
        return self.fc21(h1), self.fc22(h1)

    def reparameterize(self, mu, logvar):
        std = torch.exp(0.5 * logvar)
        eps = torch.from_numpy(noise_rng.standard_normal(std.shape).astype(np.float32))
        return mu + eps * std

    def decode(self, z):
        h3 = F.relu(self.fc3(z))
        return torch.sigmoid(self.fc4(h3))

    def forward(self, x):
        mu, logvar = self.encode(x.view(-1, 64))
        z = self.reparameterize(mu, logvar)
        return self.decode(z), mu, logvar


def loss_function(recon_x, x, mu, logvar):
    BCE = F.binary_cross_entropy(recon_x, x.view(-1, 64), reduction='sum')
    KLD = -0.5 * torch.sum(1 + logvar - mu.pow(2) - logvar.exp())
    return BCE + KLD


def main():
    torch.manual_seed(1)
    rng = np.random.default_rng(5)
    train = torch.tensor(rng.random((48, 1, 8, 8)) > 0.6, dtype=torch.float32)
    test = torch.tensor(rng.random((16, 1, 8, 8)) > 0.6).float()
    model = VAE()
    share_initial_weights(model)
    optimizer = optim.Adam(model.parameters(), lr=1e-2)
    for epoch in range(1, 4):
        model.train()
        train_loss = 0
        for batch_idx, data in enumerate(train.split(16)):
            optimizer.zero_grad()
            recon_batch, mu, logvar = model(data)
            loss = loss_function(recon_batch, data, mu, logvar)
            loss.backward()
            train_loss += loss.item()
            optimizer.step()
            print('Train Epoch: {} [{}/{}]\tLoss: {:.6f}'.format(
                epoch, batch_idx * len(data), len(train), loss.item() / len(data)))
        print('====> Epoch: {} Average loss: {:.6f}'.format(epoch, train_loss / len(train)))
        model.eval()
        with torch.no_grad():
            recon, mu, logvar = model(test)
            test_loss = loss_function(recon, test, mu, logvar).item() / len(test)
            sample = model.decode(torch.zeros(2, 4))
        print('====> Test set loss: {:.6f}, sample mean {:.6f}'.format(test_loss, sample.mean().item()))


if __name__ == "__main__":
    main()
