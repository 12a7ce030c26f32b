"""A regression script in everyday PyTorch style: a Dataset class, random_split and a
shuffled DataLoader driven by a seeded Generator, mixed precision entry points (autocast,
GradScaler) switched on where CUDA is available, evaluation under no_grad /
set_grad_enabled / inference_mode, and a checkpoint written with torch.save mid-training,
loaded with torch.load into fresh objects, and trained on from there."""

import os
import tempfile

import numpy as np
import torch
import torch.nn as nn
from torch.optim.lr_scheduler import StepLR
from torch.utils.data import DataLoader, Dataset, TensorDataset, random_split

from shared_init import share_initial_weights


class Points(Dataset):
    def __init__(self, features, targets):
        self.features = features
        self.targets = targets

    def __len__(self):
        return len(self.features)

    def __getitem__(self, i):
        return torch.from_numpy(self.features[i]), torch.tensor(self.targets[i])


def make_model():
    return nn.Sequential(nn.Linear(5, 16), nn.ReLU(), nn.Linear(16, 1))


def train_epoch(model, loader, optimizer, scaler, device, use_amp):
    model.train()
    total, count = 0.0, 0
    for x, y in loader:
        x, y = x.to(device), y.to(device)
        optimizer.zero_grad(set_to_none=True)
        with torch.autocast(device_type=device.type, dtype=torch.float16, enabled=use_amp):
            loss = nn.functional.mse_loss(model(x).squeeze(1), y)
        scaler.scale(loss).backward()
        scaler.unscale_(optimizer)
        scaler.step(optimizer)
        scaler.update()
        total += loss.item() * len(x)
        count += len(x)
    return total / count


def evaluate(model, loader, device):
    model.eval()
    total = 0.0
    with torch.set_grad_enabled(False):
        for x, y in loader:
            total += nn.functional.mse_loss(model(x.to(device)).squeeze(1), y.to(device), reduction="sum").item()
    return total / len(loader.dataset)


def main():
    torch.manual_seed(0)
    use_cuda = torch.cuda.is_available()
    device = torch.device("cuda" if use_cuda else "cpu")
    # Mixed precision only when asked: the oracle is torch on the CPU in float32, and float16
    # (with its loss-scale warm-up skipping the first steps) prints other losses.
    use_amp = use_cuda and os.environ.get("COMPAT_AMP") == "1"
    torch.backends.cudnn.benchmark = True
    rng = np.random.default_rng(3)
    features = rng.normal(size=(83, 5)).astype(np.float32)
    targets = (features @ np.array([1.0, -2.0, 0.5, 0.0, 3.0], np.float32) + 0.1).astype(np.float32)

    g = torch.Generator().manual_seed(42)
    train_set, val_set = random_split(Points(features, targets), [0.75, 0.25], generator=g)
    print("split", len(train_set), len(val_set), "first train indices", list(train_set.indices[:5]))
    train_loader = DataLoader(train_set, batch_size=8, shuffle=True, generator=g, num_workers=0, pin_memory=use_cuda)
    val_x = torch.stack([val_set[i][0] for i in range(len(val_set))])
    val_y = torch.stack([val_set[i][1] for i in range(len(val_set))])
    val_loader = DataLoader(TensorDataset(val_x, val_y), batch_size=10)
    print("batches per epoch", len(train_loader), len(val_loader))

    model = make_model()
    share_initial_weights(model)
    model.to(device)
    optimizer = torch.optim.Adam(model.parameters(), lr=0.02)
    scheduler = StepLR(optimizer, step_size=2, gamma=0.5)
    scaler = torch.amp.GradScaler(device.type, enabled=use_amp)
    history = []
    folder = tempfile.mkdtemp()
    path = os.path.join(folder, "checkpoint.pt")
    for epoch in range(1, 4):
        train_loss = train_epoch(model, train_loader, optimizer, scaler, device, use_amp)
        val_loss = evaluate(model, val_loader, device)
        scheduler.step()
        history.append({"epoch": epoch, "train": train_loss, "val": val_loss})
        print(f"epoch {epoch} train {train_loss:.6f} val {val_loss:.6f} lr {scheduler.get_last_lr()[0]:.4f}")
    torch.save({"model": model.state_dict(), "optimizer": optimizer.state_dict(),
                "scheduler": scheduler.state_dict(), "scaler": scaler.state_dict(), "epoch": 3,
                "history": history, "best": min(h["val"] for h in history), "note": None,
                "shape": (5, 16, 1)}, path)

    checkpoint = torch.load(path, map_location=device, weights_only=True)
    print("loaded epoch", checkpoint["epoch"], "best", f"{checkpoint['best']:.6f}", "shape", checkpoint["shape"],
          "note", checkpoint["note"], "history", len(checkpoint["history"]))
    resumed = make_model().to(device)
    resumed.load_state_dict(checkpoint["model"])
    optimizer = torch.optim.Adam(resumed.parameters(), lr=0.02)
    optimizer.load_state_dict(checkpoint["optimizer"])
    scheduler = StepLR(optimizer, step_size=2, gamma=0.5)
    scheduler.load_state_dict(checkpoint["scheduler"])
    scaler = torch.amp.GradScaler(device.type, enabled=use_amp)
    scaler.load_state_dict(checkpoint["scaler"])
    with torch.no_grad():
        print(f"resumed val {evaluate(resumed, val_loader, device):.6f}")
    for epoch in range(checkpoint["epoch"] + 1, 6):
        train_loss = train_epoch(resumed, train_loader, optimizer, scaler, device, use_amp)
        val_loss = evaluate(resumed, val_loader, device)
        scheduler.step()
        print(f"epoch {epoch} train {train_loss:.6f} val {val_loss:.6f} lr {scheduler.get_last_lr()[0]:.4f}")
    with torch.inference_mode():
        prediction = resumed(torch.tensor(features[:3], device=device)).squeeze(1)
    print("predictions", " ".join(f"{v:.4f}" for v in prediction.tolist()))
    print("targets", " ".join(f"{v:.4f}" for v in targets[:3].tolist()))


if __name__ == "__main__":
    main()
