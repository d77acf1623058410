#!/usr/bin/env bash
# Session 19, call 3: the compiled path's kernels with constant shapes and strides (rope_kernel_static,
# copy_heads_kernel_static): the seed004 step paired by round, its host time by phase, the compiled GPT tests;
# the new R2 = 4 mod 8 default (joint flat programs, blocks of 4) against chunks.
set -u
cd "$(dirname "$0")/.."
[ -d /tmp/site/hydra ] || bash .whl_slim/install.sh > /tmp/inst.log 2>&1
export PYTHONPATH=/tmp/site:$PWD PYTHONUNBUFFERED=1
T0=$(date +%s)
mkdir -p $OUT/r
nvidia-smi --query-gpu=name,uuid --format=csv,noheader | tee $OUT/r/gpu.txt; cp .devrun/commit.txt $OUT/r/
show() { grep -E "D=.*fwd" $1 | sed 's/.*D=/D=/' | sed 's/(build+compile [0-9.]* s)//; s/fwd\/bwd % copy  //; s/triton_v4//g' | sed "s/^/$2 /"; }
timeout 150 python -m pytest -q -p no:cacheprovider tests/rope/test_triton_gpu.py -k "compiled_gpt_launches or gpt_compiles" \
  > $OUT/r/gpu_compile_tests.txt 2>&1; tail -n 3 $OUT/r/gpu_compile_tests.txt; echo "at $(( $(date +%s) - T0 )) s"
timeout 240 python -m scripts.bench_step --model seed004 --ropes none,torch,triton_v4 --no-liger --modes compile \
  --iters 960 --rounds 16 --out $OUT/r/step_seed004 > $OUT/r/step_seed004.log 2>&1
tail -n 6 $OUT/r/step_seed004.log; echo "at $(( $(date +%s) - T0 )) s"
M="triton_v4,triton_v4@chunks"
timeout $(( 575 - $(date +%s) + T0 )) python -m scripts.bench_rope --budget-s $(( 565 - $(date +%s) + T0 )) --head-dims --variant full \
    --head-dim-list 24,40,56,88,104,136,184,232 --ropes "$M" --no-compiled --no-liger --out $OUT/r/r4 > $OUT/r/r4.log 2>&1
show $OUT/r/r4.log full; echo "at $(( $(date +%s) - T0 )) s"
cd $OUT && tar czf res.tgz r && rm -rf r
