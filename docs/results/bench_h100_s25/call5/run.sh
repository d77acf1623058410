#!/usr/bin/env bash
# Session 25, call 5: Python's GC in the compiled seed004 step (gc_probe.py), three regimes x three ropes.
set -u
cd "$(dirname "$0")/.."
[ -d /tmp/site/hydra ] || bash .whl_slim/install.sh > /tmp/inst.log 2>&1
export PYTHONPATH=/tmp/site:$PWD PYTHONUNBUFFERED=1
T0=$(date +%s)
mkdir -p $OUT/r
nvidia-smi --query-gpu=name,uuid --format=csv,noheader | tee $OUT/r/gpu.txt; cp .devrun/commit.txt $OUT/r/; cat .devrun/commit.txt
timeout 400 python .devrun/s25/gc_probe.py --rounds 8 --per 20 > $OUT/r/gc_probe.txt 2> $OUT/r/gc_probe.log
cat $OUT/r/gc_probe.txt; tail -n 3 $OUT/r/gc_probe.log
echo "at $(( $(date +%s) - T0 )) s"
cd $OUT && tar czf res.tgz r && rm -rf r
