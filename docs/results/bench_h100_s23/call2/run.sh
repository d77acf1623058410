#!/usr/bin/env bash
# Session 23, call 2: where the compiled seed004 forward's host time goes, torch against triton_v4 (Inductor's code,
# Dynamo's guards, host time by phase finely interleaved, a cProfile of the forwards).
set -u
cd "$(dirname "$0")/.."
[ -d /tmp/site/hydra ] || bash .whl_slim/install.sh > /tmp/inst.log 2>&1
export PYTHONPATH=/tmp/site:$PWD PYTHONUNBUFFERED=1
T0=$(date +%s)
mkdir -p $OUT/r
nvidia-smi --query-gpu=name,uuid --format=csv,noheader | tee $OUT/r/gpu.txt; cp .devrun/commit.txt $OUT/r/
TORCH_LOGS=output_code,guards timeout 560 python .devrun/s23/host_fwd.py --rounds 250 > $OUT/r/host_fwd.txt 2> $OUT/r/host_fwd.log
head -n 12 $OUT/r/host_fwd.txt
echo "at $(( $(date +%s) - T0 )) s"
cd $OUT && tar czf res.tgz r && rm -rf r
