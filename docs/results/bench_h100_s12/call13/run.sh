#!/usr/bin/env bash
# Session 12, call 13 (code 43c27c6): the head-dim sweep at 256M (default list), and variant=full odd halves at 256M.
set -u
cd "$(dirname "$0")/.."
[ -d /tmp/site/hydra ] || bash .whl_slim/install.sh > /tmp/inst.log 2>&1
export PYTHONPATH=/tmp/site:$PWD PYTHONUNBUFFERED=1
timeout 200 python -m scripts.bench_rope --head-dims --elements 256M --ropes triton_v4 --no-compiled --out $OUT/hd256 > $OUT/hd256.log 2>&1
grep -E "D=.*fwd" $OUT/hd256.log | sed 's/.*D=/D=/' | sed 's/(build+compile [0-9.]* s)//'
timeout 100 python -m scripts.bench_rope --variant full --head-dims --elements 256M --head-dim-list 18,22,30,50,66,130,254 --ropes triton_v4 --no-compiled --out $OUT/full256 > $OUT/full256.log 2>&1
grep -E "D=.*fwd" $OUT/full256.log | sed 's/.*D=/D=/' | sed 's/(build+compile [0-9.]* s)//'
cd $OUT && tar czf res.tgz hd256 full256 && rm -rf hd256 full256
