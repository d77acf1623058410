#!/usr/bin/env bash
# Session 25, call 6: profile_step after 6fadecf (ropes built first, timed in rotating rounds, profiled alternating
# in one session, annotations not counted): the compiled seed004 step in both orders, as call 4 ran it before.
set -u
cd "$(dirname "$0")/.."
[ -d /tmp/site/hydra ] || bash .whl_slim/install.sh > /tmp/inst.log 2>&1
export PYTHONPATH=/tmp/site:$PWD PYTHONUNBUFFERED=1
T0=$(date +%s)
mkdir -p $OUT/r
nvidia-smi --query-gpu=name,uuid --format=csv,noheader | tee $OUT/r/gpu.txt; cp .devrun/commit.txt $OUT/r/; cat .devrun/commit.txt
for order in triton_v4,torch,none none,torch,triton_v4; do
  timeout 270 python -m scripts.profile_step --model seed004 --ropes $order --iters 120 --rounds 30 --prof-steps 5 \
    > $OUT/r/profile_$order.txt 2> $OUT/r/profile_$order.log
  grep -A5 "^== per step" $OUT/r/profile_$order.txt
  grep -A5 "^== phases" $OUT/r/profile_$order.txt | tail -n 3
  tail -n 2 $OUT/r/profile_$order.log
  echo "at $(( $(date +%s) - T0 )) s"
done
cd $OUT && tar czf res.tgz r && rm -rf r
