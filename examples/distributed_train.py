"""A small data-parallel training script for examples/distributed.ipynb: every rank trains a copy of
a multilayer perceptron on its share of the data (DistributedDataParallel averages the gradients),
and every rank records through its own TrainingMonitor into one launch directory.

Run it from a notebook with ``gpu_widgets.launch(["--standalone", "--nproc_per_node=2",
"distributed_train.py"])``, or from a shell with ``torchrun --standalone --nproc_per_node=2
distributed_train.py``. On CPUs the ranks talk through gloo; on NVIDIA GPUs through NCCL, one GPU
per rank (its LOCAL_RANK).
"""
import argparse
import math
import os

import torch
import torch.distributed as dist
import torch.nn.functional as F
from torch import nn
from torch.utils.data import DataLoader, DistributedSampler, TensorDataset

from gpu_widgets import TrainingMonitor


def rings(n: int, noise: float = 0.25) -> tuple[torch.Tensor, torch.Tensor]:
    """Points on three rings of radius 1, 2 and 3; the label is the ring."""
    label = torch.randint(0, 3, (n,))
    angle = torch.rand(n) * 2 * math.pi
    radius = (label + 1).float() + noise * torch.randn(n)
    return torch.stack([radius * torch.cos(angle), radius * torch.sin(angle)], dim=1) / 3, label


class ShuffledEachEpoch:
    """The loader, telling its DistributedSampler each epoch's number first (else every epoch
    would deal the ranks the same batches in the same order)."""

    def __init__(self, loader: DataLoader) -> None:
        self.loader, self.epoch = loader, 0

    def __len__(self) -> int:
        return len(self.loader)

    def __iter__(self):
        self.loader.sampler.set_epoch(self.epoch)
        self.epoch += 1
        return iter(self.loader)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--epochs", type=int, default=8)
    parser.add_argument("--batch-size", type=int, default=32)
    args = parser.parse_args()

    cuda = torch.cuda.is_available()
    dist.init_process_group("nccl" if cuda else "gloo")
    rank, world = dist.get_rank(), dist.get_world_size()
    device = torch.device("cuda", int(os.environ.get("LOCAL_RANK", 0))) if cuda else torch.device("cpu")
    if cuda:
        torch.cuda.set_device(device)

    torch.manual_seed(0)  # the same data and the same first weights on every rank
    x, y = rings(2400)
    data = TensorDataset(x, y)
    sampler = DistributedSampler(data, shuffle=True)  # each rank its own share of every epoch
    loader = DataLoader(data, batch_size=args.batch_size, sampler=sampler)
    net = nn.Sequential(nn.Linear(2, 64), nn.ReLU(), nn.Linear(64, 64), nn.ReLU(), nn.Linear(64, 3)).to(device)
    model = nn.parallel.DistributedDataParallel(net, device_ids=[device.index] if cuda else None)
    opt = torch.optim.Adam(model.parameters(), lr=3e-3)

    # model= times each step's forward on this rank: the launch's view compares the ranks with it
    mon = TrainingMonitor(f"DDP rings, {world} ranks", model=model)
    with mon:
        for xb, yb in mon.track(ShuffledEachEpoch(loader), epochs=args.epochs):
            loss = F.cross_entropy(model(xb.to(device)), yb.to(device))
            opt.zero_grad()
            loss.backward()
            opt.step()
            mon.log(loss=loss)
    if rank == 0:
        print(f"rank 0: {mon.status}, {mon.step + 1} steps, last loss {mon.series('loss')[1][-1]:.3f}", flush=True)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
