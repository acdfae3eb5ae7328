#!/usr/bin/env bash
# The tuning grid of the measure-first defaults: the tuning split only (tabular + the Titan RTX suites), 5 seeds.
# Run from benchmarks/: bash results/tuning/run_grid.sh NAME=JSON ...
set -eu
for v in "$@"; do
  name=${v%%=*}; opts=${v#*=}
  python search_efficiency.py --seeds 5 --suites tabular nb201/titan_rtx_1 --strategies ppo --ppo "$opts" --jobs 2 \
    --out "results/tuning/ppo_${name}_5seeds.json" > "results/tuning/ppo_${name}_5seeds.log" 2>&1
done
