#!/usr/bin/env bash
# Session 22, call 8: the conformance grid on the GPU after the compiled packed-positions test's fix.
set -u
cd "$(dirname "$0")/.."
[ -d /tmp/site/hydra ] || bash .whl_slim/install.sh > /tmp/inst.log 2>&1
export PYTHONPATH=/tmp/site:$PWD PYTHONUNBUFFERED=1
T0=$(date +%s)
mkdir -p $OUT/r
nvidia-smi --query-gpu=name,uuid --format=csv,noheader | tee $OUT/r/gpu.txt; cp .devrun/commit.txt $OUT/r/; cat .devrun/commit.txt
timeout 420 python -m pytest -q -p no:cacheprovider tests/rope/test_conformance.py > $OUT/r/conformance.log 2>&1
tail -n 3 $OUT/r/conformance.log
echo "at $(( $(date +%s) - T0 )) s"
cd $OUT && tar czf res.tgz r && rm -rf r
