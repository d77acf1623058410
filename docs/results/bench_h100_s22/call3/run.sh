#!/usr/bin/env bash
# Session 22, call 3: at the final code (copy programs of 2048 elements), the fused-backward GPU tests, then the
# seed004 step (eager and compiled, 10 rounds) and the GPT-2 small step (8 rounds), against torch.
set -u
cd "$(dirname "$0")/.."
[ -d /tmp/site/hydra ] || bash .whl_slim/install.sh > /tmp/inst.log 2>&1
export PYTHONPATH=/tmp/site:$PWD PYTHONUNBUFFERED=1
T0=$(date +%s)
mkdir -p $OUT/r
nvidia-smi --query-gpu=name,uuid --format=csv,noheader | tee $OUT/r/gpu.txt; cp .devrun/commit.txt $OUT/r/; cat .devrun/commit.txt
timeout 100 python -m pytest -q -p no:cacheprovider tests/rope/test_triton.py tests/rope/test_triton_gpu.py \
  -k "fused_backward or eagerly_then or launches_the_kernel" > $OUT/r/tests.log 2>&1
tail -n 2 $OUT/r/tests.log
echo "at $(( $(date +%s) - T0 )) s"
timeout 230 python -m scripts.bench_step --model seed004 --ropes none,torch,triton_v4 --no-liger \
  --iters 600 --rounds 10 --out $OUT/r/step_seed004 > $OUT/r/step_seed004.log 2>&1
tail -n 9 $OUT/r/step_seed004.log
echo "at $(( $(date +%s) - T0 )) s"
timeout $(( 585 - $(date +%s) + T0 )) python -m scripts.bench_step --model gpt2_small --ropes none,torch,triton_v4 --no-liger \
  --iters 160 --rounds 8 --out $OUT/r/step_gpt2 > $OUT/r/step_gpt2.log 2>&1
tail -n 9 $OUT/r/step_gpt2.log
echo "at $(( $(date +%s) - T0 )) s"
cd $OUT && tar czf res.tgz r && rm -rf r
