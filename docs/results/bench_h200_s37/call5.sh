#!/usr/bin/env bash
# Session 37, call 5 (one H200): 256M elements a tensor (#13's 97% size), triton_v4 beside Liger, variant full at
# odd halves every 16 from D = 18 and four even dims, then variant partial at D = 16, 48, ..., 240, 256.
set -u
[ -d /tmp/site/hydra ] || bash .whl/install.sh > /tmp/inst.log 2>&1
export PYTHONPATH=/tmp/site:$PWD PYTHONUNBUFFERED=1 WANDB_MODE=offline
R=$OUT/call5; mkdir -p $R; T0=$(date +%s)
nvidia-smi --query-gpu=name,uuid --format=csv,noheader | tee $R/gpu.txt
git rev-parse HEAD > $R/commit.txt; git status --short > $R/status.txt
timeout 250 python -m scripts.bench_rope --budget-s 235 --head-dims --elements 256M --no-compiled --ropes triton_v4 \
  --variant full --head-dim-list 18,34,50,66,82,98,114,130,146,162,178,194,210,226,242,48,64,128,256 \
  --out $R/full256 > $R/full256.log 2>&1
echo "full256 exit $? at $(( $(date +%s) - T0 )) s"; tail -n 3 $R/full256.log | cut -c1-300
left=$(( 440 - $(date +%s) + T0 ))
timeout $left python -m scripts.bench_rope --budget-s $(( left - 15 )) --head-dims --elements 256M --no-compiled \
  --ropes triton_v4 --variant partial --head-dim-list 16,48,80,112,144,176,208,240,256 \
  --out $R/part256 > $R/part256.log 2>&1
echo "part256 exit $? at $(( $(date +%s) - T0 )) s"; tail -n 3 $R/part256.log | cut -c1-300
cd $R && tar czf ../call5.tgz . && cd .. && rm -rf call5
