#!/usr/bin/env bash
# Session 36, call 4 (one H200): every head dim of both variants at 32M elements, triton_v4 beside Liger-Kernel and
# compiled torch, one input set each, the default flush (zero): where the H100-tuned kernels stand on an H200.
set -u
[ -d /tmp/site/hydra ] || bash .whl/install.sh > /tmp/inst.log 2>&1
export PYTHONPATH=/tmp/site:$PWD PYTHONUNBUFFERED=1 WANDB_MODE=offline
R=$OUT/call4; mkdir -p $R; T0=$(date +%s)
nvidia-smi --query-gpu=name,uuid --format=csv,noheader | tee $R/gpu.txt
git rev-parse HEAD > $R/commit.txt; git status --short > $R/status.txt
timeout 330 python -m scripts.bench_rope --budget-s 315 --head-dims --variant full --head-dim-list every \
  --ropes triton_v4 --out $R/full > $R/full.log 2>&1
echo "full exit $? at $(( $(date +%s) - T0 )) s"; tail -n 6 $R/full.log | cut -c1-300
left=$(( 560 - $(date +%s) + T0 ))
timeout $left python -m scripts.bench_rope --budget-s $(( left - 15 )) --head-dims --variant partial --head-dim-list every \
  --ropes triton_v4 --out $R/partial > $R/partial.log 2>&1
echo "partial exit $? at $(( $(date +%s) - T0 )) s"; tail -n 6 $R/partial.log | cut -c1-300
cd $R && tar czf ../call4.tgz . && cd .. && rm -rf call4
