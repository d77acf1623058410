#!/usr/bin/env bash
# Session 22, call 5: the odd halves' fixed cost with the kernel's tables read into L2 after the flush, against the
# benchmark's cold start.
set -u
cd "$(dirname "$0")/.."
[ -d /tmp/site/hydra ] || bash .whl_slim/install.sh > /tmp/inst.log 2>&1
export PYTHONPATH=/tmp/site:$PWD PYTHONUNBUFFERED=1
T0=$(date +%s)
mkdir -p $OUT/r
nvidia-smi --query-gpu=name,uuid --format=csv,noheader | tee $OUT/r/gpu.txt; cp .devrun/commit.txt $OUT/r/; cat .devrun/commit.txt
timeout $(( 400 - $(date +%s) + T0 )) python .devrun/s22/table_warm.py > $OUT/r/table_warm.txt 2>&1; cat $OUT/r/table_warm.txt
echo "at $(( $(date +%s) - T0 )) s"
cd $OUT && tar czf res.tgz r && rm -rf r
