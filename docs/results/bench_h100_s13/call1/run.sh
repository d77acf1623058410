#!/usr/bin/env bash
# Session 13, call 1: host overhead (paired loops), the compiled seed004 step profile, steps seed004 + GPT-2 small.
set -u
cd "$(dirname "$0")/.."
[ -d /tmp/site/hydra ] || bash .whl_slim/install.sh > /tmp/inst.log 2>&1
export PYTHONPATH=/tmp/site:$PWD PYTHONUNBUFFERED=1
T0=$(date +%s)
nvidia-smi --query-gpu=name,clocks.sm,clocks.mem --format=csv
timeout 150 python -m scripts.bench_rope --overhead --ropes triton_v4,torch,torch_compiled --out $OUT/ovh > $OUT/ovh.log 2>&1
tail -40 $OUT/ovh.log
echo "at $(( $(date +%s) - T0 )) s"
timeout 120 python -m scripts.profile_step --model seed004 --ropes none,torch,triton_v4 > $OUT/prof.txt 2>&1
tail -60 $OUT/prof.txt
echo "at $(( $(date +%s) - T0 )) s"
timeout 200 python -m scripts.bench_step --model seed004 --ropes none,torch,triton_v4 --modes compile --iters 960 --rounds 16 --out $OUT/step_seed004 > $OUT/step_seed004.log 2>&1
cat $OUT/step_seed004/step_bench.md
echo "at $(( $(date +%s) - T0 )) s"
cd $OUT && tar czf res.tgz ovh step_seed004 && rm -rf ovh step_seed004
