#!/usr/bin/env bash
# Session 24, call 7: the compiled GPT-2-small step after the traced fused-qkv forward change (200 rounds of 2 steps).
set -u
cd "$(dirname "$0")/.."
[ -d /tmp/site/hydra ] || bash .whl_slim/install.sh > /tmp/inst.log 2>&1
export PYTHONPATH=/tmp/site:$PWD PYTHONUNBUFFERED=1
T0=$(date +%s)
mkdir -p $OUT/r
nvidia-smi --query-gpu=name,uuid --format=csv,noheader | tee $OUT/r/gpu.txt; cp .devrun/commit.txt $OUT/r/; cat .devrun/commit.txt
timeout 500 python -m scripts.bench_step --model gpt2_small --ropes none,torch,triton_v4 --no-liger \
  --modes compile --iters 400 --rounds 200 --out $OUT/r/step_gpt2 > $OUT/r/step_gpt2.log 2>&1
tail -n 7 $OUT/r/step_gpt2.log
echo "at $(( $(date +%s) - T0 )) s"
cd $OUT && tar czf res.tgz r && rm -rf r
