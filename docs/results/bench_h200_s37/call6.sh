#!/usr/bin/env bash
# Session 37, call 6 (one H200): joint flat programs (q's programs rotate k's blocks, one table load for both) at the
# layouts' flat geometries (rotary_dim < D, both layouts; interleaved), which the rules run apart: on the H200 the
# half layout's copied tails read 83-88% of copy in call 3 against 91-92 interleaved.
set -u
[ -d /tmp/site/hydra ] || bash .whl/install.sh > /tmp/inst.log 2>&1
export PYTHONPATH=/tmp/site:$PWD PYTHONUNBUFFERED=1 WANDB_MODE=offline
R=$OUT/call6; mkdir -p $R; T0=$(date +%s)
nvidia-smi --query-gpu=name,uuid --format=csv,noheader | tee $R/gpu.txt
git rev-parse HEAD > $R/commit.txt; git status --short > $R/status.txt
timeout 250 python -m scripts.bench_rope --budget-s 235 --layouts --no-compiled \
  --ropes triton_v4,triton_v4@joint,triton_v4@joint+block=4 --out $R/lay > $R/lay.log 2>&1
echo "lay exit $? at $(( $(date +%s) - T0 )) s"; grep -E "^\| (D|[0-9])" $R/lay/layouts.md | cut -c1-330
cd $R && tar czf ../call6.tgz . && cd .. && rm -rf call6
