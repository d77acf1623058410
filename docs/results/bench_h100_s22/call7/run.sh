#!/usr/bin/env bash
# Session 22, call 7: the Triton GPU suite at the final code (the fused backward at real sizes through run_case's
# qkv layout), then the conformance grid on the GPU.
set -u
cd "$(dirname "$0")/.."
[ -d /tmp/site/hydra ] || bash .whl_slim/install.sh > /tmp/inst.log 2>&1
export PYTHONPATH=/tmp/site:$PWD PYTHONUNBUFFERED=1
T0=$(date +%s)
mkdir -p $OUT/r
nvidia-smi --query-gpu=name,uuid --format=csv,noheader | tee $OUT/r/gpu.txt; cp .devrun/commit.txt $OUT/r/; cat .devrun/commit.txt
timeout 330 python -m pytest -q -p no:cacheprovider tests/rope/test_triton_gpu.py -k "not every_head_dim" > $OUT/r/gpu_suite.log 2>&1
tail -n 3 $OUT/r/gpu_suite.log
echo "at $(( $(date +%s) - T0 )) s"
timeout $(( 570 - $(date +%s) + T0 )) python -m pytest -q -p no:cacheprovider tests/rope/test_conformance.py -x > $OUT/r/conformance.log 2>&1
tail -n 3 $OUT/r/conformance.log
echo "at $(( $(date +%s) - T0 )) s"
cd $OUT && tar czf res.tgz r && rm -rf r
