"""Data sets for the spaces: sklearn's digits (embedded) and CIFAR-10 (local files).

Each data set is a ``torch.utils.data.Dataset`` that loads its own data from
plain arguments, so NNI can serialise it into trials cheaply (wrapping big
tensors fails there with "payload larger than 64 KB").

* digits: the 1,797 8x8 images shipped with scikit-learn, split 60/20/20
  (train/validation/test), stratified, with a fixed seed. Nothing is downloaded.
  For a space that takes other inputs (NNI's hub spaces take 3x32x32), the
  images are upsampled (bilinear) to its size and repeated over its channels.
* CIFAR-10: read by torchvision from a directory the user gives (never
  downloaded); split 40,000 train / 10,000 validation (both from the
  training set) / 10,000 test; random crop with 4-pixel padding and horizontal
  flips on the training split.
"""

from __future__ import annotations

from functools import cache
from pathlib import Path

import numpy as np
import torch
from torch.utils.data import Dataset

from nni_hwaware.errors import HwAwareError

__all__ = ["SPLITS", "Cifar10", "Digits", "make_dataset"]

SPLITS = ("train", "val", "test")


def _check_split(split: str) -> None:
    if split not in SPLITS:
        raise HwAwareError(f"unknown split {split!r}; use one of {', '.join(SPLITS)}")


@cache
def _digits_split_indices(seed: int) -> dict[str, np.ndarray]:
    from sklearn.datasets import load_digits
    from sklearn.model_selection import train_test_split

    labels = load_digits().target
    index = np.arange(len(labels))
    train, rest = train_test_split(index, train_size=0.6, stratify=labels, random_state=seed)
    val, test = train_test_split(rest, train_size=0.5, stratify=labels[rest], random_state=seed)
    return {"train": np.sort(train), "val": np.sort(val), "test": np.sort(test)}


class Digits(Dataset):
    """sklearn's digits as 1x8x8 float images scaled to [0, 1] and standardised.

    ``shape`` (C, H, W) upsamples them to H x W and repeats them over C channels.
    """

    num_classes = 10

    def __init__(self, split: str = "train", seed: int = 0, shape: tuple[int, ...] | None = None) -> None:
        from sklearn.datasets import load_digits

        _check_split(split)
        self.split, self.seed = split, seed
        digits = load_digits()
        index = _digits_split_indices(seed)[split]
        images = torch.tensor(digits.images[index], dtype=torch.float32).unsqueeze(1) / 16.0
        images = (images - 0.3) / 0.4  # mean and std of the scaled pixels, rounded
        if shape is not None and tuple(shape) != (1, 8, 8):
            if len(shape) != 3 or min(shape) < 1:
                raise HwAwareError(f"digits can be shaped to (C, H, W), not {tuple(shape)}")
            images = torch.nn.functional.interpolate(images, size=tuple(shape[1:]), mode="bilinear",
                                                     align_corners=False).repeat(1, shape[0], 1, 1)
        self.images = images
        self.labels = torch.tensor(digits.target[index], dtype=torch.long)

    def __len__(self) -> int:
        return len(self.labels)

    def __getitem__(self, i: int) -> tuple[torch.Tensor, torch.Tensor]:
        return self.images[i], self.labels[i]


class Cifar10(Dataset):
    """CIFAR-10 from ``root`` (torchvision's layout) with a 40k/10k/10k train/validation/test split."""

    num_classes = 10
    mean = (0.4914, 0.4822, 0.4465)
    std = (0.2470, 0.2435, 0.2616)

    def __init__(self, root: str, split: str = "train", seed: int = 0, augment: bool = True) -> None:
        from torchvision import datasets, transforms

        _check_split(split)
        self.root, self.split, self.seed = root, split, seed
        normalise = [transforms.ToTensor(), transforms.Normalize(self.mean, self.std)]
        augmentation = [transforms.RandomCrop(32, padding=4), transforms.RandomHorizontalFlip()]
        transform = transforms.Compose((augmentation if augment and split == "train" else []) + normalise)
        try:
            base = datasets.CIFAR10(root, train=split != "test", download=False, transform=transform)
        except RuntimeError:
            raise HwAwareError(
                f"CIFAR-10 not found in {Path(root).resolve()}: put torchvision's 'cifar-10-batches-py' "
                "folder there (nothing is downloaded)"
            ) from None
        self.base = base
        if split == "test":
            self.index = np.arange(len(base))
        else:
            order = np.random.default_rng(seed).permutation(len(base))
            self.index = np.sort(order[:40_000] if split == "train" else order[40_000:])

    def __len__(self) -> int:
        return len(self.index)

    def __getitem__(self, i: int) -> tuple[torch.Tensor, int]:
        return self.base[int(self.index[i])]


def make_dataset(name: str, split: str, *, seed: int = 0, data_dir: str | None = None,
                 shape: tuple[int, ...] | None = None) -> Dataset:
    """The ``split`` of data set ``name`` ('digits' or 'cifar10'), for a space taking ``shape`` inputs."""
    if name == "digits":
        return Digits(split, seed, shape)
    if name == "cifar10":
        if not data_dir:
            raise HwAwareError("CIFAR-10 needs a data directory: pass --data-dir / data_dir pointing to it")
        if shape is not None and tuple(shape) != (3, 32, 32):
            raise HwAwareError(f"CIFAR-10 images are 3x32x32; the space takes {tuple(shape)}: use digits")
        return Cifar10(data_dir, split, seed)
    raise HwAwareError(f"unknown data set {name!r}; use 'digits' or 'cifar10'")
