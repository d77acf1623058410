#!/usr/bin/env bash
# Session 25, call 4: is profile_step's host time order-dependent? The compiled seed004 step profiled with the ropes
# in the order triton_v4,torch,none and then none,torch,triton_v4 (call 3's order), one machine.
set -u
cd "$(dirname "$0")/.."
[ -d /tmp/site/hydra ] || bash .whl_slim/install.sh > /tmp/inst.log 2>&1
export PYTHONPATH=/tmp/site:$PWD PYTHONUNBUFFERED=1
T0=$(date +%s)
mkdir -p $OUT/r
nvidia-smi --query-gpu=name,uuid --format=csv,noheader | tee $OUT/r/gpu.txt; cp .devrun/commit.txt $OUT/r/; cat .devrun/commit.txt
for order in triton_v4,torch,none none,torch,triton_v4; do
  timeout 250 python -m scripts.profile_step --model seed004 --ropes $order --iters 60 --prof-steps 5 \
    > $OUT/r/profile_$order.txt 2> $OUT/r/profile_$order.log
  sed -n 2,4p $OUT/r/profile_$order.txt
  grep -A5 "^== phases" $OUT/r/profile_$order.txt | tail -n 3
  echo "at $(( $(date +%s) - T0 )) s"
done
cd $OUT && tar czf res.tgz r && rm -rf r
