"""NNI's Lightning evaluator of a search: the space's data in a resumable order, the devices, the checkpoints.

:func:`gumbel_evaluator` builds NNI's ``Classification`` evaluator that
:class:`~nni_hwaware.strategies.gumbel.strategy.HardwareGumbelDARTS` trains the supernet with:
SGD on the weights, training batches for the weights and validation batches for the
architecture, each in an :class:`EpochShuffle` order (the same batches after a resume), a
Lightning ``last.ckpt`` checkpoint when ``search.checkpoint`` is on, DDP over
``search.devices`` > 1 (whose extra processes :func:`is_rank_zero` tells apart).
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

import torch
from torch.utils.data import Dataset, Sampler

from nni_hwaware.spaces.skeleton import SpaceConfig
from nni_hwaware.strategies.gumbel.job_config import GumbelSearchConfig

__all__ = ["EpochShuffle", "gumbel_evaluator", "is_rank_zero"]


class EpochShuffle(Sampler[int]):
    """A random order of ``n`` indices that depends only on ``(seed, epoch)``.

    Lightning calls :meth:`set_epoch` before each epoch, so a search resumed from a
    checkpoint sees the same batches as one that never stopped.
    """

    def __init__(self, n: int, seed: int) -> None:
        self.n, self.seed, self.epoch = n, seed, 0

    def set_epoch(self, epoch: int) -> None:
        self.epoch = epoch

    def __len__(self) -> int:
        return self.n

    def __iter__(self) -> Any:
        generator = torch.Generator().manual_seed(self.seed * 1_000_003 + self.epoch)
        return iter(torch.randperm(self.n, generator=generator).tolist())


def _datasets(config: GumbelSearchConfig, space: SpaceConfig) -> dict[str, Dataset]:
    from nni_hwaware.spaces.data import make_dataset

    return {split: make_dataset(space.dataset, split, seed=config.seed, data_dir=config.data_dir,
                                shape=tuple(space.input_shape)) for split in ("train", "val")}


def gumbel_evaluator(config: GumbelSearchConfig, space: SpaceConfig | Any, max_epochs: int, out: Path,
                     extra_callbacks: Sequence[Any] = ()) -> Any:
    """NNI's Lightning ``Classification`` evaluator of a search: the space's data, ``config.search``'s options."""
    from functools import partial

    from nni.nas.evaluator.pytorch import Classification, DataLoader
    from pytorch_lightning.callbacks import ModelCheckpoint

    s = config.search
    data = _datasets(config, space)
    loaders = {
        "train": DataLoader(data["train"], batch_size=s.batch_size, sampler=EpochShuffle(len(data["train"]), config.seed),
                            num_workers=s.workers),
        "val": DataLoader(data["val"], batch_size=s.batch_size,
                          sampler=EpochShuffle(len(data["val"]), config.seed + 1), num_workers=s.workers),
    }
    callbacks = list(extra_callbacks)
    if s.checkpoint:
        callbacks.append(ModelCheckpoint(dirpath=out / "checkpoints", filename="last", save_top_k=1,
                                         enable_version_counter=False))
    accelerator = "gpu" if s.accelerator == "cuda" else s.accelerator
    strategy = "ddp_find_unused_parameters_true" if s.devices > 1 else "auto"
    return Classification(
        optimizer=partial(torch.optim.SGD, momentum=s.momentum, nesterov=s.momentum > 0),
        learning_rate=s.lr, weight_decay=s.weight_decay, num_classes=space.num_classes,
        train_dataloaders=loaders["train"], val_dataloaders=loaders["val"],
        max_epochs=max_epochs, accelerator=accelerator, devices=s.devices, strategy=strategy,
        logger=False, enable_progress_bar=False, enable_model_summary=False, num_sanity_val_steps=0,
        enable_checkpointing=s.checkpoint, callbacks=callbacks, default_root_dir=str(out),
        gradient_clip_val=None)


def is_rank_zero() -> bool:
    """False in the extra processes of a multi-device (DDP) search: they stop after searching."""
    import os

    return int(os.environ.get("RANK", os.environ.get("LOCAL_RANK", "0"))) == 0

