#!/usr/bin/env bash
# Session 24, call 6: the launch chain before and after on one machine (the session-23 rope package, d91e52e, from
# .devrun/old, against the current one, alternately, twice each); then the conformance grid on the GPU.
set -u
cd "$(dirname "$0")/.."
[ -d /tmp/site/hydra ] || bash .whl_slim/install.sh > /tmp/inst.log 2>&1
export PYTHONUNBUFFERED=1
T0=$(date +%s)
mkdir -p $OUT/r
nvidia-smi --query-gpu=name,uuid --format=csv,noheader | tee $OUT/r/gpu.txt; cp .devrun/commit.txt $OUT/r/; cat .devrun/commit.txt
for rep in 1 2; do
  for v in old new; do
    if [ $v = old ]; then PP=/tmp/site:$PWD/.devrun/old:$PWD; else PP=/tmp/site:$PWD; fi
    PYTHONPATH=$PP TORCHINDUCTOR_CACHE_DIR=/tmp/ind_$v timeout 120 python .devrun/s24/launch_chain_ab.py \
      > $OUT/r/chain_${v}_$rep.txt 2> $OUT/r/chain_${v}_$rep.log
    echo "== $v $rep"; grep -E "rope package|torch  |triton_v4 " $OUT/r/chain_${v}_$rep.txt
    echo "at $(( $(date +%s) - T0 )) s"
  done
done
export PYTHONPATH=/tmp/site:$PWD
timeout $(( 585 - $(date +%s) + T0 )) python -m pytest -q -p no:cacheprovider -rf tests/rope/test_conformance.py \
  > $OUT/r/conformance.log 2>&1
tail -n 3 $OUT/r/conformance.log; grep -E "^FAILED" $OUT/r/conformance.log | head
echo "at $(( $(date +%s) - T0 )) s"
cd $OUT && tar czf res.tgz r && rm -rf r
