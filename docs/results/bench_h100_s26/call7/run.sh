#!/usr/bin/env bash
# Session 26, call 7: a one-launch copy of q's and k's bytes beside triton_v4 under the three flushes (flush_modes.py
# --one-launch): what a perfect streaming call of those bytes reads under each.
set -u
cd "$(dirname "$0")/.."
[ -d /tmp/site/hydra ] || bash .whl_slim/install.sh > /tmp/inst.log 2>&1
export PYTHONPATH=/tmp/site:$PWD PYTHONUNBUFFERED=1
T0=$(date +%s)
mkdir -p $OUT/r
nvidia-smi --query-gpu=name,uuid --format=csv,noheader | tee $OUT/r/gpu.txt; cp .devrun/commit.txt $OUT/r/
timeout 200 python .devrun/s26/flush_modes.py 18,38,48,54,56,64,114,128,206,208 --one-launch > $OUT/r/flush_modes.txt 2>&1; cat $OUT/r/flush_modes.txt
echo "at $(( $(date +%s) - T0 )) s"
cd $OUT && tar czf res.tgz r && rm -rf r
