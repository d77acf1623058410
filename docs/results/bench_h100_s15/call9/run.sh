#!/usr/bin/env bash
# Session 15, call 9: test_triton_gpu.py whole, in one process, at the final code (call 4's sequence, which hit an
# illegal address at test_gpt_compiles_fullgraph[triton_v2-False]).
set -u
cd "$(dirname "$0")/.."
[ -d /tmp/site/hydra ] || bash .whl_slim/install.sh > /tmp/inst.log 2>&1
export PYTHONPATH=/tmp/site:$PWD PYTHONUNBUFFERED=1
T0=$(date +%s)
mkdir -p $OUT/r
timeout 330 python -m pytest -q -p no:cacheprovider tests/rope/test_triton_gpu.py > $OUT/r/gpu.log 2>&1
tail -n 3 $OUT/r/gpu.log; grep -m 5 "^FAILED\|^ERROR\|illegal" $OUT/r/gpu.log
echo "at $(( $(date +%s) - T0 )) s"
cd $OUT && tar czf res.tgz r && rm -rf r
