"""A small CNN classifier in the style of the classic PyTorch MNIST example: DataLoader,
Adadelta, StepLR, a train loop printing losses and a test loop printing accuracy.
Synthetic 1x12x12 images (numpy, seeded) keep it fast on a software GPU."""

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F
import torch.optim as optim
from torch.optim.lr_scheduler import StepLR
from torch.utils.data import DataLoader, TensorDataset

from shared_init import share_initial_weights


class Net(nn.Module):
    def __init__(self):
        super(Net, self).__init__()
        self.conv1 = nn.Conv2d(1, 8, 3, 1)
        self.conv2 = nn.Conv2d(8, 16, 3, 1)
        self.fc1 = nn.Linear(16 * 4 * 4, 32)
        self.fc2 = nn.Linear(32, 4)

    def forward(self, x):
        x = self.conv1(x)
        x = F.relu(x)
        x = self.conv2(x)
        x = F.relu(x)
        x = F.max_pool2d(x, 2)
        x = torch.flatten(x, 1)
        x = self.fc1(x)
        x = F.relu(x)
        x = self.fc2(x)
        output = F.log_softmax(x, dim=1)
        return output


def make_data(rng, n):
    labels = rng.integers(0, 4, size=n)
    images = rng.normal(0.0, 0.5, size=(n, 1, 12, 12)).astype(np.float32)
    for i, label in enumerate(labels):  # a bright quadrant per class
        r, c = divmod(int(label), 2)
        images[i, 0, r * 6:(r + 1) * 6, c * 6:(c + 1) * 6] += 1.0
    return torch.from_numpy(images), torch.from_numpy(labels)


def train(model, device, train_loader, optimizer, epoch):
    model.train()
    for batch_idx, (data, target) in enumerate(train_loader):
        data, target = data.to(device), target.to(device)
        optimizer.zero_grad()
        output = model(data)
        loss = F.nll_loss(output, target)
        loss.backward()
        optimizer.step()
        print('Train Epoch: {} [{}/{} ({:.0f}%)]\tLoss: {:.6f}'.format(
            epoch, batch_idx * len(data), len(train_loader.dataset),
            100. * batch_idx / len(train_loader), loss.item()))


def test(model, device, test_loader):
    model.eval()
    test_loss = 0
    correct = 0
    with torch.no_grad():
        for data, target in test_loader:
            data, target = data.to(device), target.to(device)
            output = model(data)
            test_loss += F.nll_loss(output, target, reduction='sum').item()
            pred = output.argmax(dim=1, keepdim=True)
            correct += pred.eq(target.view_as(pred)).sum().item()
    test_loss /= len(test_loader.dataset)
    print('\nTest set: Average loss: {:.4f}, Accuracy: {}/{} ({:.0f}%)\n'.format(
        test_loss, correct, len(test_loader.dataset),
        100. * correct / len(test_loader.dataset)))


def main():
    torch.manual_seed(1)
    use_cuda = torch.cuda.is_available()
    device = torch.device("cuda" if use_cuda else "cpu")
    rng = np.random.default_rng(0)
    train_x, train_y = make_data(rng, 96)
    test_x, test_y = make_data(rng, 40)
    train_loader = DataLoader(TensorDataset(train_x, train_y), batch_size=32, shuffle=False)
    test_loader = DataLoader(TensorDataset(test_x, test_y), batch_size=20)

    model = Net()
    share_initial_weights(model)
    model = model.to(device)
    optimizer = optim.Adadelta(model.parameters(), lr=1.0)
    scheduler = StepLR(optimizer, step_size=1, gamma=0.7)
    for epoch in range(1, 3):
        train(model, device, train_loader, optimizer, epoch)
        test(model, device, test_loader)
        scheduler.step()
        print("lr", scheduler.get_last_lr()[0])


if __name__ == '__main__':
    main()
