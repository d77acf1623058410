#!/usr/bin/env bash
# Session 15, call 2: launch plans + direct compiled launch. GPU tests of the new path and the whole GPU suite of
# the Triton entries, then the host-overhead mode beside Liger.
set -u
cd "$(dirname "$0")/.."
[ -d /tmp/site/hydra ] || bash .whl_slim/install.sh > /tmp/inst.log 2>&1
export PYTHONPATH=/tmp/site:$PWD PYTHONUNBUFFERED=1
T0=$(date +%s)
mkdir -p $OUT/r
git log --oneline -1 2>/dev/null
timeout 60 python -m pytest -q -p no:cacheprovider tests/rope/test_triton_gpu.py -k "kept_plan or replaced_kernel" 2>&1 | tail -n 15
echo "at $(( $(date +%s) - T0 )) s"
timeout 150 python -m scripts.bench_rope --overhead --ropes triton_v4,liger --out $OUT/r/ovh > $OUT/r/ovh.log 2>&1
grep -E "^\|" $OUT/r/ovh/overhead.md
tail -n 3 $OUT/r/ovh.log
echo "at $(( $(date +%s) - T0 )) s"
timeout $(( 580 - $(date +%s) + T0 )) python -m pytest -q -p no:cacheprovider -x tests/rope/test_triton_gpu.py tests/rope/test_triton.py \
   -k "not every_head_dim" > $OUT/r/gputests.log 2>&1
tail -n 8 $OUT/r/gputests.log
echo "at $(( $(date +%s) - T0 )) s"
cd $OUT && tar czf res.tgz r && rm -rf r
