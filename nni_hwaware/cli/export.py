"""``export``: a network of any space to ONNX / TorchScript, each file checked against PyTorch.

Which network is exported is :func:`nni_hwaware.export.export_source`'s choice.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from nni_hwaware.cli.options import add_space, space_args
from nni_hwaware.cli.registry import command
from nni_hwaware.errors import HwAwareError

__all__ = ["run_export"]


def add_export(parser: argparse.ArgumentParser) -> None:
    from nni_hwaware.export import KNOWN_FORMATS

    parser.add_argument("source", nargs="?",
                        help="a finished PPO experiment (id or directory: its found network) or an architecture "
                             "JSON; optional with --weights")
    parser.add_argument("--weights", help="network.pt a search wrote (the trained network: its space, "
                                          "architecture and weights)")
    add_space(parser, required=False)
    parser.add_argument("--format", action="append", choices=list(KNOWN_FORMATS),
                        help="export format, repeatable (default: onnx and torchscript); onnx-int8 is calibrated "
                             "on 256 training images drawn by --seed")
    parser.add_argument("--seed", type=int, default=0, help="initialisation of an untrained network (default: 0)")
    parser.add_argument("--out", required=True, help="directory for network.onnx / network.torchscript.pt")


@command("export", "export a network of any space to ONNX / TorchScript / int8 ONNX / OpenVINO, checked against "
                   "PyTorch", add_export)
def run_export(args: argparse.Namespace) -> int:
    from nni_hwaware.export import (
        FORMATS,
        calibration_images,
        export_network,
        export_source,
        file_name,
        onnx_available,
    )

    chosen = export_source(args.source, weights=args.weights, space=args.space, space_args=space_args(args),
                           seed=args.seed)
    if chosen.warning:
        print(f"warning: {chosen.warning}", file=sys.stderr)
    formats = list(dict.fromkeys(args.format or FORMATS))
    if "onnx" in formats and not onnx_available():
        if args.format:
            raise HwAwareError("ONNX export needs the onnx extra: pip install 'nni-hwaware[onnx]'")
        formats.remove("onnx")
        print("no ONNX export: install the onnx extra (pip install 'nni-hwaware[onnx]')")
    print(f"exporting {chosen.description}")
    out = Path(args.out)
    shape = tuple(chosen.named.input_shape)
    calibration = calibration_images(chosen.named.dataset, shape, seed=args.seed) if "onnx-int8" in formats else None
    bad = []
    for fmt in formats:
        check = export_network(chosen.network, shape, out / file_name(fmt), fmt, seed=args.seed,
                               calibration=calibration)
        state = "matches PyTorch" if check.matches else "DIFFERS from PyTorch"
        print(f"{check.path}: {state} on a batch of {check.batch} (largest difference {check.max_abs_diff:.2g})")
        if not check.matches:
            bad.append(fmt)
    if bad:
        raise HwAwareError(f"the {', '.join(bad)} export does not reproduce the network; report this with the "
                           "architecture")
    return 0
