#!/usr/bin/env bash
# Session 22, call 2: the GPU tests that failed in call 1 (a kept wrap_triton answer) and the fused-backward tests,
# the fused launch with two copy-program sizes against two launches, the seed004 step eager and compiled.
set -u
cd "$(dirname "$0")/.."
[ -d /tmp/site/hydra ] || bash .whl_slim/install.sh > /tmp/inst.log 2>&1
export PYTHONPATH=/tmp/site:$PWD PYTHONUNBUFFERED=1
T0=$(date +%s)
mkdir -p $OUT/r
nvidia-smi --query-gpu=name,uuid --format=csv,noheader | tee $OUT/r/gpu.txt; cp .devrun/commit.txt $OUT/r/
timeout 200 python -m pytest -q -p no:cacheprovider tests/rope/test_triton.py \
  -k "fused_backward or qkv or traced or copy_heads or buffer or compiles or poison or launch_config" > $OUT/r/tests1.log 2>&1
tail -n 3 $OUT/r/tests1.log
timeout 120 python -m pytest -q -p no:cacheprovider tests/rope/test_triton_gpu.py -k "eagerly_then or launches_the_kernel" > $OUT/r/tests2.log 2>&1
tail -n 3 $OUT/r/tests2.log
echo "at $(( $(date +%s) - T0 )) s"
timeout 150 python .devrun/s22/fused_bwd.py > $OUT/r/fused_bwd.txt 2>&1; cat $OUT/r/fused_bwd.txt | tail -n 9
echo "at $(( $(date +%s) - T0 )) s"
timeout $(( 585 - $(date +%s) + T0 )) python -m scripts.bench_step --model seed004 --ropes none,torch,triton_v4 --no-liger \
  --iters 600 --rounds 10 --out $OUT/r/step_seed004 > $OUT/r/step_seed004.log 2>&1
tail -n 9 $OUT/r/step_seed004.log
echo "at $(( $(date +%s) - T0 )) s"
cd $OUT && tar czf res.tgz r && rm -rf r
