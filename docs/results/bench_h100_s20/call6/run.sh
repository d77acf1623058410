#!/usr/bin/env bash
# Session 20, call 6: the compiled seed004 step (code as session 19 ended it), 24 rounds of 60 steps on a fifth machine, for
# the estimate pooled over calls.
set -u
cd "$(dirname "$0")/.."
[ -d /tmp/site/hydra ] || bash .whl_slim/install.sh > /tmp/inst.log 2>&1
export PYTHONPATH=/tmp/site:$PWD PYTHONUNBUFFERED=1
T0=$(date +%s)
mkdir -p $OUT/r
nvidia-smi --query-gpu=name,uuid --format=csv,noheader | tee $OUT/r/gpu.txt; cp .devrun/commit.txt $OUT/r/
timeout 300 python -m scripts.bench_step --model seed004 --ropes none,torch,triton_v4 --no-liger --modes compile \
  --iters 1440 --rounds 24 --out $OUT/r/step_seed004 > $OUT/r/step_seed004.log 2>&1
tail -n 6 $OUT/r/step_seed004.log; echo "at $(( $(date +%s) - T0 )) s"
cd $OUT && tar czf res.tgz r && rm -rf r
