"""Train one network of a space and evaluate it: what every trial and every retrain runs.

A plain PyTorch loop (SGD with momentum, cosine learning rate, cross entropy),
seeded without touching the global random state: weights are initialised inside
``torch.random.fork_rng`` and batches are shuffled by a seeded generator, so the
same seed gives the same network and the same accuracy. The epoch with the best
validation top-1 is kept and evaluated on the test split.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

import torch
from torch import nn
from torch.utils.data import DataLoader, Dataset

from nni_hwaware.errors import HwAwareError
from nni_hwaware.profiling import fixed_threads
from nni_hwaware.spaces.data import make_dataset
from nni_hwaware.spaces.skeleton import SpaceConfig
from nni_hwaware.training.train_config import TrainConfig

__all__ = ["TrainConfig", "TrainResult", "evaluate", "train_architecture", "train_network"]


@dataclass
class TrainResult:
    """Accuracies of the best-on-validation epoch; ``history`` holds every epoch."""

    val_top1: float
    val_top3: float
    test_top1: float
    test_top3: float
    best_epoch: int
    train_seconds: float
    history: list[dict[str, float]] = field(default_factory=list)
    state_dict: dict[str, torch.Tensor] | None = field(default=None, repr=False)

    def metrics(self) -> dict[str, float]:
        return {"val_top1": self.val_top1, "val_top3": self.val_top3, "test_top1": self.test_top1,
                "test_top3": self.test_top3, "best_epoch": self.best_epoch,
                "train_seconds": self.train_seconds}


@torch.no_grad()
def evaluate(net: nn.Module, loader: DataLoader, device: str) -> tuple[float, float, float]:
    """Top-1 and top-3 accuracy (in [0, 1]) and mean cross entropy of ``net`` on ``loader``."""
    net.eval()
    correct1 = correct3 = total = 0
    loss = 0.0
    for x, y in loader:
        x, y = x.to(device), y.to(device)
        logits = net(x)
        loss += float(nn.functional.cross_entropy(logits, y, reduction="sum"))
        top3 = logits.topk(min(3, logits.shape[1]), dim=1).indices
        correct1 += int((top3[:, 0] == y).sum())
        correct3 += int((top3 == y[:, None]).any(dim=1).sum())
        total += len(y)
    return correct1 / total, correct3 / total, loss / total


def _loader(data: Dataset, batch_size: int, shuffle: bool, seed: int, workers: int) -> DataLoader:
    generator = torch.Generator().manual_seed(seed) if shuffle else None
    return DataLoader(data, batch_size=batch_size, shuffle=shuffle, generator=generator,
                      num_workers=workers)


def train_network(net: nn.Module, dataset: str, train: TrainConfig,
                  on_epoch: Callable[[int, dict[str, float]], None] | None = None,
                  keep_weights: bool = False, input_shape: tuple[int, ...] | None = None) -> TrainResult:
    """Train ``net`` on ``dataset``'s train split; keep the epoch best on validation; test it.

    ``on_epoch(epoch, metrics)`` is called after each epoch with the train loss and
    validation accuracies (what a trial reports as intermediate results). A loss
    that stops being finite raises, naming the epoch and the last finite loss.
    """
    import time

    splits = {s: make_dataset(dataset, s, seed=train.seed, data_dir=train.data_dir, shape=input_shape)
              for s in ("train", "val", "test")}
    loaders = {s: _loader(d, train.batch_size, s == "train", train.seed, train.workers)
               for s, d in splits.items()}
    device = train.device
    start = time.perf_counter()
    with fixed_threads(train.threads):
        net.to(device)
        optimiser = torch.optim.SGD(net.parameters(), lr=train.lr, momentum=train.momentum,
                                    weight_decay=train.weight_decay, nesterov=True)
        schedule = torch.optim.lr_scheduler.CosineAnnealingLR(optimiser, train.epochs)
        best: tuple[float, float, int, dict[str, torch.Tensor]] | None = None
        history: list[dict[str, float]] = []
        last_finite = float("nan")
        for epoch in range(train.epochs):
            net.train()
            total, count = 0.0, 0
            for x, y in loaders["train"]:
                x, y = x.to(device), y.to(device)
                loss = nn.functional.cross_entropy(net(x), y)
                if not torch.isfinite(loss):
                    raise HwAwareError(
                        f"training loss became {float(loss)} in epoch {epoch}; last finite loss "
                        f"{last_finite:.4g}: lower the learning rate (lr={train.lr})"
                    )
                last_finite = loss.item()
                optimiser.zero_grad(set_to_none=True)
                loss.backward()
                optimiser.step()
                total += last_finite * len(y)
                count += len(y)
            schedule.step()
            val1, val3, val_loss = evaluate(net, loaders["val"], device)
            record = {"epoch": epoch, "train_loss": total / count, "val_top1": val1, "val_top3": val3,
                      "val_loss": val_loss}
            history.append(record)
            if on_epoch is not None:
                on_epoch(epoch, record)
            if best is None or val1 > best[0]:
                best = (val1, val3, epoch, {k: v.detach().clone() for k, v in net.state_dict().items()})
        assert best is not None
        net.load_state_dict(best[3])
        test1, test3, _ = evaluate(net, loaders["test"], device)
    return TrainResult(val_top1=best[0], val_top3=best[1], test_top1=test1, test_top3=test3,
                       best_epoch=best[2], train_seconds=time.perf_counter() - start, history=history,
                       state_dict=best[3] if keep_weights else None)


def train_architecture(config: SpaceConfig | Any, arch: Mapping[str, Any], train: TrainConfig,
                       on_epoch: Callable[[int, dict[str, float]], None] | None = None,
                       keep_weights: bool = False) -> TrainResult:
    """Build ``arch`` of a space from random initialisation (seeded by ``train.seed``) and train it.

    ``config`` is the space: a :class:`SpaceConfig` or a
    :class:`~nni_hwaware.spaces.resolve.NamedSpace` (any NNI model space).
    """
    from nni_hwaware.spaces.resolve import resolve_space

    config = resolve_space(config)  # the project's spaces are ModelSpaces like any other
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(train.seed)
        net = config.build(arch)
    with torch.random.fork_rng(devices=[]):
        # Augmentation draws from the global generator: seed it inside the fork too.
        torch.manual_seed(train.seed + 1)
        return train_network(net, config.dataset, train, on_epoch, keep_weights,
                             input_shape=tuple(config.input_shape))
