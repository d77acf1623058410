#!/usr/bin/env bash
# Session 19, call 6: the GPU tests at the final kernel code (every head dim, GQA at the joint geometries, layouts and
# positions, kept plans, the compiled GPT with the constant-shape twins).
set -u
cd "$(dirname "$0")/.."
[ -d /tmp/site/hydra ] || bash .whl_slim/install.sh > /tmp/inst.log 2>&1
export PYTHONPATH=/tmp/site:$PWD PYTHONUNBUFFERED=1
T0=$(date +%s)
mkdir -p $OUT/r
nvidia-smi --query-gpu=name,uuid --format=csv,noheader | tee $OUT/r/gpu.txt; cp .devrun/commit.txt $OUT/r/
timeout 480 python -m pytest -q -p no:cacheprovider tests/rope/test_triton_gpu.py \
  -k "every_head_dim or gqa_at_the_joint or layout_positions or kept_plan or compiled_gpt_launches or gpt_compiles" \
  > $OUT/r/gpu_tests.log 2>&1
tail -n 15 $OUT/r/gpu_tests.log
echo "at $(( $(date +%s) - T0 )) s"
cd $OUT && tar czf res.tgz r && rm -rf r
