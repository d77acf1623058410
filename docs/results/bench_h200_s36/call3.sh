#!/usr/bin/env bash
# Session 36, call 3 (one H200): the host probe and the overhead mode after the plan key's change (positions
# without their shape, one storage query for all operands); launch settings beside the defaults at six head dims.
set -u
[ -d /tmp/site/hydra ] || bash .whl/install.sh > /tmp/inst.log 2>&1
export PYTHONPATH=/tmp/site:$PWD PYTHONUNBUFFERED=1 WANDB_MODE=offline
R=$OUT/call3; mkdir -p $R
nvidia-smi --query-gpu=name,uuid --format=csv,noheader | tee $R/gpu.txt
lscpu | grep -E "Model name|^CPU\(s\)" >> $R/gpu.txt
git rev-parse HEAD > $R/commit.txt; git status --short > $R/status.txt; git diff > $R/change.diff
timeout 150 python docs/results/bench_h200_s36/scripts/host_probe.py --no-profile > $R/host_probe.txt 2>&1
echo "probe exit $?"; cat $R/host_probe.txt | cut -c1-120
timeout 100 python -m scripts.bench_rope --overhead --ropes triton_v4 --no-compiled --no-liger --out $R/ovh > $R/ovh.log 2>&1
echo "overhead exit $?"; grep "overhead " $R/ovh.log | cut -c1-400
timeout 120 python -m scripts.bench_rope --head-dims --variant full --head-dim-list 48,64,128 --no-liger --no-compiled \
  --ropes triton_v4,triton_v4@tile=4096,triton_v4@warps=4,triton_v4@tile=1024,triton_v4@chunks,triton_v4@flat \
  --out $R/rows > $R/rows.log 2>&1
echo "rows exit $?"; grep -E "head_dim" $R/rows.log | cut -c1-400
timeout 150 python -m scripts.bench_rope --head-dims --variant full --head-dim-list 54,114,206 --no-liger --no-compiled \
  --ropes triton_v4,triton_v4@tile=2048,triton_v4@warps=8,triton_v4@block=4,triton_v4@apart,triton_v4@elements,triton_v4@words,triton_v4@split \
  --out $R/flat > $R/flat.log 2>&1
echo "flat exit $?"; grep -E "head_dim" $R/flat.log | cut -c1-500
cd $R && tar czf ../call3.tgz . && cd .. && rm -rf call3
