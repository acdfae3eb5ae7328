"""``proxy``: score a space's networks by the zero-cost proxy ahead of a search (the PPO option proxy_scores)."""

from __future__ import annotations

import argparse
import itertools
import math
import random
import time
from pathlib import Path

from nni_hwaware.cli.options import add_space, named_space
from nni_hwaware.cli.registry import command
from nni_hwaware.errors import HwAwareError

__all__ = ["input_shape", "run_proxy"]


def add_proxy(parser: argparse.ArgumentParser) -> None:
    from nni_hwaware.strategies.ppo.config import PROXIES, PPOConfig

    add_space(parser)
    parser.add_argument("--input-shape", help="per-sample input shape the proxy scores with, e.g. 3x16x16 "
                                              "(default: the space's; the PPO option proxy_input_shape)")
    parser.add_argument("--samples", type=int, help="score this many random networks (default: every network, "
                                                    "where the space has at most --limit)")
    parser.add_argument("--limit", type=int, default=20_000, help="the most networks scored when listing them all")
    parser.add_argument("--seed", type=int, default=0, help="the random networks' seed (with --samples)")
    parser.add_argument("--out", required=True, help="CSV to write: give it to a search as the PPO option proxy_scores")
    parser.add_argument("--merge", action="store_true", help="keep the scores --out already holds")
    parser.add_argument("--proxy", default=PPOConfig.proxy, choices=[p for p in PROXIES if p != "none"],
                        help=f"the proxies scored (the PPO option proxy; default {PPOConfig.proxy})")


def input_shape(args: argparse.Namespace) -> tuple[int, ...] | None:
    """``--input-shape`` (e.g. ``3x16x16``) as sizes; None when not given."""
    if not args.input_shape:
        return None
    try:
        shape = tuple(int(v) for v in args.input_shape.lower().split("x"))
    except ValueError:
        shape = ()
    if not shape or min(shape) < 1:
        raise HwAwareError(f"--input-shape must be sizes such as 3x16x16, got {args.input_shape!r}")
    return shape


@command("proxy", "score a space's networks by the zero-cost proxy ahead of a search (PPO option proxy_scores)",
         add_proxy)
def run_proxy(args: argparse.Namespace) -> int:
    from nni_hwaware.zero_cost import ProxyScores

    named = named_space(args)
    scores = ProxyScores(named, args.proxy, input_shape=input_shape(args))
    choices = named.choices()
    size = math.prod(len(v) for v in choices.values())
    if args.samples is None and size > args.limit:
        raise HwAwareError(f"space {named.name} has {size:.3g} networks, more than --limit {args.limit}; "
                           "give --samples N to score N random ones")
    if args.samples is not None and args.samples < 1:
        raise HwAwareError(f"--samples must be at least 1, got {args.samples}")
    if args.samples is None:
        archs = [dict(zip(choices, values, strict=True)) for values in itertools.product(*choices.values())]
    else:
        rng = random.Random(args.seed)
        archs = [{label: rng.choice(values) for label, values in choices.items()} for _ in range(args.samples)]
    scores.prepare(archs[0])  # the proxies the space's networks can feed (naswot needs ReLU-like modules)
    if args.merge and Path(args.out).is_file():
        scores.load(args.out)
    start = time.perf_counter()
    scores.check(archs[0])  # a network that cannot be scored: one line before the rest
    scores(archs)
    scores.save(args.out)
    print(f"scored {scores.computed} networks of {named.name} in {time.perf_counter() - start:.1f} s "
          f"({scores.mean_ms():.1f} ms each); {len(scores.cache)} scores in {args.out}")
    return 0
