#!/usr/bin/env bash
# Session 12, call 11 (code af1b9c4): flat at R2 = 2 mod 8 now that even halves drop the no-op select.
set -u
cd "$(dirname "$0")/.."
[ -d /tmp/site/hydra ] || bash .whl_slim/install.sh > /tmp/inst.log 2>&1
export PYTHONPATH=/tmp/site:$PWD PYTHONUNBUFFERED=1
timeout 120 python -m scripts.bench_rope --head-dims --head-dim-list 20,36,52,68 --ropes triton_v4,triton_v4@flat --no-liger --no-compiled --out $OUT/hd > $OUT/hd.log 2>&1
grep -E "D=.*fwd" $OUT/hd.log | sed 's/.*D=/D=/' | sed 's/(build+compile [0-9.]* s)//'
timeout 90 python -m scripts.bench_rope --head-dims --elements 256M --head-dim-list 20,36 --ropes triton_v4,triton_v4@flat --no-liger --no-compiled --out $OUT/hd256 > $OUT/hd256.log 2>&1
grep -E "D=.*fwd" $OUT/hd256.log | sed 's/.*D=/D=/' | sed 's/(build+compile [0-9.]* s)//'
cd $OUT && tar czf res.tgz hd hd256 && rm -rf hd hd256
