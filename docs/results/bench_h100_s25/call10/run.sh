#!/usr/bin/env bash
# Session 25, call 10: profile_step at the final code (after review), default mode, as a check that it runs.
set -u
cd "$(dirname "$0")/.."
[ -d /tmp/site/hydra ] || bash .whl_slim/install.sh > /tmp/inst.log 2>&1
export PYTHONPATH=/tmp/site:$PWD PYTHONUNBUFFERED=1
T0=$(date +%s)
mkdir -p $OUT/r
nvidia-smi --query-gpu=name,uuid --format=csv,noheader | tee $OUT/r/gpu.txt; cp .devrun/commit.txt $OUT/r/; cat .devrun/commit.txt
timeout 270 python -m scripts.profile_step --model seed004 --ropes none,torch,triton_v4 --iters 40 --rounds 10 \
  --prof-steps 3 > $OUT/r/profile_default.txt 2> $OUT/r/profile_default.log
grep -A5 "^== per step" $OUT/r/profile_default.txt
grep -A5 "^== phases" $OUT/r/profile_default.txt | tail -n 3
grep -A4 "GPU idle gaps" $OUT/r/profile_default.txt | head -12
echo "at $(( $(date +%s) - T0 )) s"
cd $OUT && tar czf res.tgz r && rm -rf r
