#!/usr/bin/env bash
# Session 26, call 2: zero / read / steady timing on one machine (flush_modes.py), copy, triton_v4 fwd and bwd,
# Liger fwd; then the small odd halves under both flushes through the benchmark.
set -u
cd "$(dirname "$0")/.."
[ -d /tmp/site/hydra ] || bash .whl_slim/install.sh > /tmp/inst.log 2>&1
export PYTHONPATH=/tmp/site:$PWD PYTHONUNBUFFERED=1
T0=$(date +%s)
mkdir -p $OUT/r
nvidia-smi --query-gpu=name,uuid --format=csv,noheader | tee $OUT/r/gpu.txt; cp .devrun/commit.txt $OUT/r/
timeout 300 python .devrun/s26/flush_modes.py 18,30,34,38,42,46,50,54,56,64,86,114,116,128,206,208 > $OUT/r/flush_modes.txt 2>&1; cat $OUT/r/flush_modes.txt
echo "at $(( $(date +%s) - T0 )) s"
cd $OUT && tar czf res.tgz r && rm -rf r
