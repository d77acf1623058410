#!/usr/bin/env bash
# Session 21, call 3: the forward and backward on several input pairs (.devrun/s21/placement2.py).
set -u
cd "$(dirname "$0")/.."
[ -d /tmp/site/hydra ] || bash .whl_slim/install.sh > /tmp/inst.log 2>&1
export PYTHONPATH=/tmp/site:$PWD PYTHONUNBUFFERED=1
mkdir -p $OUT/r
nvidia-smi --query-gpu=name,uuid --format=csv,noheader | tee $OUT/r/gpu.txt; cp .devrun/commit.txt $OUT/r/
timeout 500 python .devrun/s21/placement2.py full:54 full:154 full:114 full:128 full:206 partial:48 2>&1 | tee $OUT/r/placement2.txt
cd $OUT && tar czf res.tgz r && rm -rf r
