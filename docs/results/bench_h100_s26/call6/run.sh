#!/usr/bin/env bash
# Session 26, call 6 (same machine as calls 3-5 if it is still held): the training steps, seed004 and GPT-2 small,
# eager and compiled, rope none / torch / triton_v4, paired by round.
set -u
cd "$(dirname "$0")/.."
[ -d /tmp/site/hydra ] || bash .whl_slim/install.sh > /tmp/inst.log 2>&1
export PYTHONPATH=/tmp/site:$PWD PYTHONUNBUFFERED=1
T0=$(date +%s)
mkdir -p $OUT/r
nvidia-smi --query-gpu=name,uuid --format=csv,noheader | tee $OUT/r/gpu.txt; cp .devrun/commit.txt $OUT/r/
timeout 280 python -m scripts.bench_step --model seed004 --ropes none,torch,triton_v4 --no-liger \
  --iters 600 --rounds 10 --out $OUT/r/step_seed004 > $OUT/r/step_seed004.log 2>&1
tail -n 9 $OUT/r/step_seed004.log
echo "at $(( $(date +%s) - T0 )) s"
timeout $(( 585 - $(date +%s) + T0 )) python -m scripts.bench_step --model gpt2_small --ropes none,torch,triton_v4 --no-liger \
  --iters 160 --rounds 8 --out $OUT/r/step_gpt2 > $OUT/r/step_gpt2.log 2>&1
tail -n 9 $OUT/r/step_gpt2.log
echo "at $(( $(date +%s) - T0 )) s"
cd $OUT && tar czf res.tgz r && rm -rf r
