#!/usr/bin/env bash
# Session 26, call 8: under --flush steady, does the timed call find its cos/sin tables in the L2? table_steady.py:
# zero, zero + the call's tables read, steady, steady with another module's call (other tables) before.
set -u
cd "$(dirname "$0")/.."
[ -d /tmp/site/hydra ] || bash .whl_slim/install.sh > /tmp/inst.log 2>&1
export PYTHONPATH=/tmp/site:$PWD PYTHONUNBUFFERED=1
T0=$(date +%s)
mkdir -p $OUT/r
nvidia-smi --query-gpu=name,uuid --format=csv,noheader | tee $OUT/r/gpu.txt; cp .devrun/commit.txt $OUT/r/
timeout 240 python .devrun/s26/table_steady.py > $OUT/r/table_steady.txt 2>&1; cat $OUT/r/table_steady.txt
echo "at $(( $(date +%s) - T0 )) s"
cd $OUT && tar czf res.tgz r && rm -rf r
