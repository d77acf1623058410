#!/usr/bin/env bash
# Session 25, call 8: profile_step at the fixed phase attribution, default mode and reduce-overhead.
set -u
cd "$(dirname "$0")/.."
[ -d /tmp/site/hydra ] || bash .whl_slim/install.sh > /tmp/inst.log 2>&1
export PYTHONPATH=/tmp/site:$PWD PYTHONUNBUFFERED=1
T0=$(date +%s)
mkdir -p $OUT/r
nvidia-smi --query-gpu=name,uuid --format=csv,noheader | tee $OUT/r/gpu.txt; cp .devrun/commit.txt $OUT/r/; cat .devrun/commit.txt
for mode in default reduce-overhead; do
  extra=""; [ $mode = reduce-overhead ] && extra="--mode reduce-overhead"
  timeout 270 python -m scripts.profile_step --model seed004 --ropes none,torch,triton_v4 --iters 120 --rounds 30 \
    --prof-steps 5 $extra > $OUT/r/profile_$mode.txt 2> $OUT/r/profile_$mode.log
  grep -A5 "^== per step" $OUT/r/profile_$mode.txt
  grep -A5 "^== phases" $OUT/r/profile_$mode.txt | tail -n 3
  tail -n 1 $OUT/r/profile_$mode.log
  echo "at $(( $(date +%s) - T0 )) s"
done
cd $OUT && tar czf res.tgz r && rm -rf r
