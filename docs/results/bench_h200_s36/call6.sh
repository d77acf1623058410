#!/usr/bin/env bash
# Session 36, call 6 (one H200): the H200 rules as landed (f3bfe86) against the H100's choices forced, beside Liger:
# odd halves D = 18 ... 50 (joint from 34 on; 18-30 joint for a look), rows under 3/4 busy (D = 80, 144, 160, 176).
set -u
[ -d /tmp/site/hydra ] || bash .whl/install.sh > /tmp/inst.log 2>&1
export PYTHONPATH=/tmp/site:$PWD PYTHONUNBUFFERED=1 WANDB_MODE=offline
R=$OUT/call6; mkdir -p $R
nvidia-smi --query-gpu=name,uuid --format=csv,noheader | tee $R/gpu.txt
git rev-parse HEAD > $R/commit.txt; git status --short > $R/status.txt
timeout 200 python -m scripts.bench_rope --head-dims --variant full --head-dim-list 18,22,26,30,34,38,42,46,50 \
  --no-compiled --ropes triton_v4,triton_v4@apart,triton_v4@joint --out $R/odd > $R/odd.log 2>&1
echo "odd exit $?"; grep -E "head_dim" $R/odd.log | cut -c1-400
for v in full partial; do
  timeout 100 python -m scripts.bench_rope --head-dims --variant $v --head-dim-list 80,144,160,176,48 \
    --no-compiled --ropes triton_v4,triton_v4@rows --out $R/rows_$v > $R/rows_$v.log 2>&1
  echo "rows $v exit $?"; grep -E "head_dim" $R/rows_$v.log | cut -c1-400
done
cd $R && tar czf ../call6.tgz . && cd .. && rm -rf call6
