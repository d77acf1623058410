#!/usr/bin/env bash
# Session 37, call 4 (one H200): the compiled seed004 step finely (1000 rounds of 2 steps a rope, as session 25 on the
# H100), to see whether call 3's +2.4% [+0.7, +4.1] for triton_v4 against compiled torch (8 rounds) holds.
set -u
[ -d /tmp/site/hydra ] || bash .whl/install.sh > /tmp/inst.log 2>&1
export PYTHONPATH=/tmp/site:$PWD PYTHONUNBUFFERED=1 WANDB_MODE=offline
R=$OUT/call4; mkdir -p $R; T0=$(date +%s)
nvidia-smi --query-gpu=name,uuid --format=csv,noheader | tee $R/gpu.txt
git rev-parse HEAD > $R/commit.txt; git status --short > $R/status.txt
timeout 420 python -m scripts.bench_step --model seed004 --ropes none,torch,triton_v4 --no-liger --modes compile \
  --iters 2000 --rounds 1000 --out $R/fine > $R/fine.log 2>&1
echo "fine exit $? at $(( $(date +%s) - T0 )) s"; tail -n 6 $R/fine.log | cut -c1-300
cd $R && tar czf ../call4.tgz . && cd .. && rm -rf call4
