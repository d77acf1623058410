#!/usr/bin/env bash
# Session 12, call 12 (code af1b9c4): flat against the default at R2 = 4 mod 8 (chunks of 4 pairs).
set -u
cd "$(dirname "$0")/.."
[ -d /tmp/site/hydra ] || bash .whl_slim/install.sh > /tmp/inst.log 2>&1
export PYTHONPATH=/tmp/site:$PWD PYTHONUNBUFFERED=1
timeout 200 python -m scripts.bench_rope --head-dims --head-dim-list 24,40,56,88,104,120,152,184,216 --ropes triton_v4,triton_v4@flat --no-liger --no-compiled --out $OUT/hd > $OUT/hd.log 2>&1
grep -E "D=.*fwd" $OUT/hd.log | sed 's/.*D=/D=/' | sed 's/(build+compile [0-9.]* s)//'
cd $OUT && tar czf res.tgz hd && rm -rf hd
