#!/usr/bin/env bash
# Session 13, call 8: GPU tests at the closing code (7849dcb): every head dim of both variants and the layouts with
# positions; the tiling-identity test, half layout (flat with both table formats), as far as its time limit goes.
set -u
cd "$(dirname "$0")/.."
[ -d /tmp/site/hydra ] || bash .whl_slim/install.sh > /tmp/inst.log 2>&1
export PYTHONPATH=/tmp/site:$PWD PYTHONUNBUFFERED=1
T0=$(date +%s)
timeout 200 python -m pytest -q -x tests/rope/test_triton_gpu.py -k "every_head_dim or layout_positions" 2>&1 | tail -2 | tee $OUT/gpu_tests.txt
echo "at $(( $(date +%s) - T0 )) s"
timeout 130 python -m pytest -q -x tests/rope/test_triton.py -k "identical_results and triton_v4 and half" 2>&1 | tail -2 | tee -a $OUT/gpu_tests.txt
echo "at $(( $(date +%s) - T0 )) s"
