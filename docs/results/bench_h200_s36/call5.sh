#!/usr/bin/env bash
# Session 36, call 5 (one H200): launch settings beside the defaults where the H200 sweep (call 4) found the kernels
# weakest: odd halves under D = 54 (programs apart), D = 80 and 160 (rows), D = 144 (chunks).
set -u
[ -d /tmp/site/hydra ] || bash .whl/install.sh > /tmp/inst.log 2>&1
export PYTHONPATH=/tmp/site:$PWD PYTHONUNBUFFERED=1 WANDB_MODE=offline
R=$OUT/call5; mkdir -p $R
nvidia-smi --query-gpu=name,uuid --format=csv,noheader | tee $R/gpu.txt
git rev-parse HEAD > $R/commit.txt; git status --short > $R/status.txt
timeout 150 python -m scripts.bench_rope --head-dims --variant full --head-dim-list 34,42,46,50 --no-liger --no-compiled \
  --ropes triton_v4,triton_v4@joint,triton_v4@joint+words,triton_v4@joint+elements,triton_v4@elements,triton_v4@words+split \
  --out $R/small > $R/small.log 2>&1
echo "small exit $?"; grep -E "head_dim" $R/small.log | cut -c1-500
timeout 150 python -m scripts.bench_rope --head-dims --variant full --head-dim-list 80,160,144,48 --no-liger --no-compiled \
  --ropes triton_v4,triton_v4@chunks,triton_v4@flat,triton_v4@flat+joint,triton_v4@flat+joint+block=4,triton_v4@rows+tile=1024 \
  --out $R/rows > $R/rows.log 2>&1
echo "rows exit $?"; grep -E "head_dim" $R/rows.log | cut -c1-500
cd $R && tar czf ../call5.tgz . && cd .. && rm -rf call5
