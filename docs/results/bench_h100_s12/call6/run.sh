#!/usr/bin/env bash
# Session 12, call 6 (code f138bf5): the head-dim sweep at 32M beside Liger and compiled torch; 256M at the
# R2 = 2 mod 4 dims; packed sequences.
set -u
cd "$(dirname "$0")/.."
[ -d /tmp/site/hydra ] || bash .whl_slim/install.sh > /tmp/inst.log 2>&1
export PYTHONPATH=/tmp/site:$PWD PYTHONUNBUFFERED=1
T0=$(date +%s)
timeout 240 python -m scripts.bench_rope --head-dims --ropes triton_v4 --out $OUT/hd32 > $OUT/hd32.log 2>&1
grep -E "D=.*fwd" $OUT/hd32.log | sed 's/.*D=/D=/' | sed 's/(build+compile [0-9.]* s)//'
echo "at $(( $(date +%s) - T0 )) s"
timeout 100 python -m scripts.bench_rope --head-dims --elements 256M --head-dim-list 20,28,36,44,48,128 --ropes triton_v4 --no-liger --no-compiled --out $OUT/hd256 > $OUT/hd256.log 2>&1
grep -E "D=.*fwd" $OUT/hd256.log | sed 's/.*D=/D=/' | sed 's/(build+compile [0-9.]* s)//'
echo "at $(( $(date +%s) - T0 )) s"
timeout 100 python -m scripts.bench_rope --packed --ropes triton_v4 --out $OUT/packed > $OUT/packed.log 2>&1
grep -E "^\| [0-9]" $OUT/packed/packed.md
echo "at $(( $(date +%s) - T0 )) s"
cd $OUT && tar czf res.tgz hd32 hd256 packed && rm -rf hd32 hd256 packed
