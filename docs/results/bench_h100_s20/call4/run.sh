#!/usr/bin/env bash
# Session 20, call 4: placement of k relative to q (apart / shifted / fused views) at joint and other geometries;
# then the odd halves with t-major... (placement only)
set -u
cd "$(dirname "$0")/.."
[ -d /tmp/site/hydra ] || bash .whl_slim/install.sh > /tmp/inst.log 2>&1
export PYTHONPATH=/tmp/site:$PWD PYTHONUNBUFFERED=1
mkdir -p $OUT/r
nvidia-smi --query-gpu=name,uuid --format=csv,noheader | tee $OUT/r/gpu.txt; cp .devrun/commit.txt $OUT/r/
timeout 400 python .devrun/s20/placement.py full:54 full:150 full:114 full:198 partial:68 partial:40 partial:60 full:128 full:18 2>&1 | tee $OUT/r/placement.txt
cd $OUT && tar czf res.tgz r && rm -rf r
