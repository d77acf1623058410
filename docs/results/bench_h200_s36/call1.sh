#!/usr/bin/env bash
# Session 36, call 1 (one H200): where the module call's host time with positions and grad goes; the overhead
# mode; triton_v4 beside Liger and compiled torch at six head dims, 32M elements, under the zero and steady flushes.
set -u
bash .whl/install.sh > /tmp/inst.log 2>&1 || { echo "wheel install failed"; tail -5 /tmp/inst.log; }
export PYTHONPATH=/tmp/site:$PWD PYTHONUNBUFFERED=1 WANDB_MODE=offline
R=$OUT/call1; mkdir -p $R
nvidia-smi --query-gpu=name,uuid,clocks.max.sm,clocks.max.mem --format=csv,noheader | tee $R/gpu.txt
lscpu | grep -E "Model name|^CPU\(s\)" >> $R/gpu.txt
git rev-parse HEAD > $R/commit.txt; git status --short > $R/status.txt
timeout 200 python docs/results/bench_h200_s36/scripts/host_probe.py > $R/host_probe.txt 2>&1; echo "probe exit $?"
head -40 $R/host_probe.txt
timeout 120 python -m scripts.bench_rope --overhead --ropes triton_v4 --no-compiled --no-liger --out $R/ovh > $R/ovh.log 2>&1
echo "overhead exit $?"; grep "overhead " $R/ovh.log | cut -c1-400
for run in "zero 32M" "zero 64M" "steady 64M"; do
  set -- $run
  timeout 150 python -m scripts.bench_rope --head-dims --variant full --head-dim-list 48,54,64,114,128,206 \
    --ropes triton_v4 --flush $1 --elements $2 --out $R/hd_$1_$2 > $R/hd_$1_$2.log 2>&1
  echo "hd $1 $2 exit $?"; grep -E "head_dim|copy bandwidth" $R/hd_$1_$2.log | cut -c1-300
done
cd $R && tar czf ../call1.tgz . && cd .. && rm -rf call1
