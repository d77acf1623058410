#!/usr/bin/env bash
# Session 12, call 7 (code f138bf5 + docs): the whole Triton GPU suite.
set -u
cd "$(dirname "$0")/.."
[ -d /tmp/site/hydra ] || bash .whl_slim/install.sh > /tmp/inst.log 2>&1
export PYTHONPATH=/tmp/site:$PWD PYTHONUNBUFFERED=1
T0=$(date +%s)
timeout 480 python -m pytest -q -x tests/rope/test_triton_gpu.py 2>&1 | tail -3 | tee $OUT/gpu_suite.txt
echo "at $(( $(date +%s) - T0 )) s"
