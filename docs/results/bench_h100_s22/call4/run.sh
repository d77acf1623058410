#!/usr/bin/env bash
# Session 22, call 4: fixed cost against rate at odd and even halves (variant full), five sizes 8M-128M.
set -u
cd "$(dirname "$0")/.."
[ -d /tmp/site/hydra ] || bash .whl_slim/install.sh > /tmp/inst.log 2>&1
export PYTHONPATH=/tmp/site:$PWD PYTHONUNBUFFERED=1
T0=$(date +%s)
mkdir -p $OUT/r
nvidia-smi --query-gpu=name,uuid --format=csv,noheader | tee $OUT/r/gpu.txt; cp .devrun/commit.txt $OUT/r/; cat .devrun/commit.txt
timeout $(( 580 - $(date +%s) + T0 )) python .devrun/s22/fixed_cost.py > $OUT/r/fixed_cost.txt 2>&1; cat $OUT/r/fixed_cost.txt
echo "at $(( $(date +%s) - T0 )) s"
cd $OUT && tar czf res.tgz r && rm -rf r
