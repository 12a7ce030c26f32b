"""A small ResNet in the style of torchvision's BasicBlock / CIFAR training loops:
3x3 convolutions without bias, BatchNorm2d, `out += identity` (in place, in the graph),
ReLU(inplace=True), a 1x1 downsample Sequential, AdaptiveAvgPool2d + flatten, SGD with
momentum and weight decay, MultiStepLR, train/eval accuracy."""

import numpy as np
import torch
import torch.nn as nn
import torch.optim as optim

from shared_init import share_initial_weights


def conv3x3(in_planes, out_planes, stride=1):
    return nn.Conv2d(in_planes, out_planes, kernel_size=3, stride=stride, padding=1, bias=False)


class BasicBlock(nn.Module):
    expansion = 1

    def __init__(self, inplanes, planes, stride=1, downsample=None):
        super().__init__()
        self.conv1 = conv3x3(inplanes, planes, stride)
        self.bn1 = nn.BatchNorm2d(planes)
        self.relu = nn.ReLU(inplace=True)
        self.conv2 = conv3x3(planes, planes)
        self.bn2 = nn.BatchNorm2d(planes)
        self.downsample = downsample
        self.stride = stride

    def forward(self, x):
        identity = x
        out = self.conv1(x)
        out = self.bn1(out)
        out = self.relu(out)
        out = self.conv2(out)
        out = self.bn2(out)
        if self.downsample is not None:
            identity = self.downsample(x)
        out += identity
        out = self.relu(out)
        return out


class ResNet(nn.Module):
    def __init__(self, num_classes=3):
        super().__init__()
        self.inplanes = 8
        self.conv1 = nn.Conv2d(3, 8, kernel_size=3, stride=1, padding=1, bias=False)
        self.bn1 = nn.BatchNorm2d(8)
        self.relu = nn.ReLU(inplace=True)
        self.layer1 = self._make_layer(8, 1)
        self.layer2 = self._make_layer(16, 1, stride=2)
        self.avgpool = nn.AdaptiveAvgPool2d((1, 1))
        self.fc = nn.Linear(16, num_classes)
        for m in self.modules():
            if isinstance(m, nn.Conv2d):
                nn.init.kaiming_normal_(m.weight, mode="fan_out", nonlinearity="relu")
            elif isinstance(m, nn.BatchNorm2d):
                nn.init.constant_(m.weight, 1)
                nn.init.constant_(m.bias, 0)

    def _make_layer(self, planes, blocks, stride=1):
        downsample = None
        if stride != 1 or self.inplanes != planes:
            downsample = nn.Sequential(
                nn.Conv2d(self.inplanes, planes, kernel_size=1, stride=stride, bias=False),
                nn.BatchNorm2d(planes),
            )
        layers = [BasicBlock(self.inplanes, planes, stride, downsample)]
        self.inplanes = planes
        for _ in range(1, blocks):
            layers.append(BasicBlock(self.inplanes, planes))
        return nn.Sequential(*layers)

    def forward(self, x):
        x = self.relu(self.bn1(self.conv1(x)))
        x = self.layer1(x)
        x = self.layer2(x)
        x = self.avgpool(x)
        x = torch.flatten(x, 1)
        return self.fc(x)


def main():
    torch.manual_seed(0)
    rng = np.random.default_rng(11)
    labels = rng.integers(0, 3, size=48)
    images = rng.normal(0, 1, size=(48, 3, 8, 8)).astype(np.float32)
    images[np.arange(48), labels] += 1.5  # the class brightens its own channel
    inputs, targets = torch.from_numpy(images), torch.from_numpy(labels).long()
    net = ResNet()
    share_initial_weights(net)
    criterion = nn.CrossEntropyLoss()
    optimizer = optim.SGD(net.parameters(), lr=0.05, momentum=0.9, weight_decay=5e-4)
    scheduler = optim.lr_scheduler.MultiStepLR(optimizer, milestones=[2], gamma=0.1)
    for epoch in range(3):
        net.train()
        train_loss, correct, total = 0, 0, 0
        for batch_idx in range(3):
            x, y = inputs[batch_idx * 16:(batch_idx + 1) * 16], targets[batch_idx * 16:(batch_idx + 1) * 16]
            optimizer.zero_grad()
            outputs = net(x)
            loss = criterion(outputs, y)
            loss.backward()
            optimizer.step()
            train_loss += loss.item()
            _, predicted = outputs.max(1)
            total += y.size(0)
            correct += predicted.eq(y).sum().item()
            print('epoch %d batch %d | Loss: %.6f | Acc: %.3f%% (%d/%d)'
                  % (epoch, batch_idx, train_loss / (batch_idx + 1), 100. * correct / total, correct, total))
        scheduler.step()
        net.eval()
        with torch.no_grad():
            outputs = net(inputs)
            test_loss = criterion(outputs, targets).item()
            predicted = outputs.argmax(1)
            print(f"eval loss {test_loss:.6f} acc {(predicted == targets).float().mean().item():.4f} "
                  f"lr {optimizer.param_groups[0]['lr']:.4f}")
    print("running_mean[:3]", [round(v, 4) for v in net.bn1.running_mean[:3].tolist()])


if __name__ == '__main__':
    main()
