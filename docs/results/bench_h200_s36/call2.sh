#!/usr/bin/env bash
# Session 36, call 2 (one H200): joint flat programs over 2 or 4 batch elements (LaunchConfig.batch, the table
# loaded once for all of them) against the default, at odd halves and other joint geometries.
set -u
[ -d /tmp/site/hydra ] || bash .whl/install.sh > /tmp/inst.log 2>&1
export PYTHONPATH=/tmp/site:$PWD PYTHONUNBUFFERED=1 WANDB_MODE=offline
R=$OUT/call2; mkdir -p $R
nvidia-smi --query-gpu=name,uuid --format=csv,noheader | tee $R/gpu.txt
git rev-parse HEAD > $R/commit.txt; git status --short > $R/status.txt; git diff > $R/change.diff
DIMS=54,58,86,114,150,206,230,254,36,40,100,48,128
timeout 280 python -m scripts.bench_rope --head-dims --variant full --head-dim-list $DIMS --no-liger --no-compiled \
  --ropes triton_v4,triton_v4@batch=2,triton_v4@batch=4 --out $R/z32 > $R/z32.log 2>&1
echo "z32 exit $?"; grep -E "head_dim|copy bandwidth" $R/z32.log | cut -c1-300
timeout 250 python -m scripts.bench_rope --head-dims --variant full --head-dim-list $DIMS --no-liger --no-compiled \
  --ropes triton_v4,triton_v4@batch=2,triton_v4@batch=4 --elements 64M --flush steady --out $R/s64 > $R/s64.log 2>&1
echo "s64 exit $?"; grep -E "head_dim|copy bandwidth" $R/s64.log | cut -c1-300
cd $R && tar czf ../call2.tgz . && cd .. && rm -rf call2
