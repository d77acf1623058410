#!/usr/bin/env bash
# Session 12, call 10: A/B on one machine: the kernel with the pass-through select always (f138bf5) and
# without it where nothing is copied (76873ee), at odd halves and R2 = 6 mod 8, twice each, interleaved.
set -u
cd "$(dirname "$0")/.."
[ -d /tmp/site/hydra ] || bash .whl_slim/install.sh > /tmp/inst.log 2>&1
export PYTHONPATH=/tmp/site:$PWD PYTHONUNBUFFERED=1
cp rope/_triton_kernels.py /tmp/k_new.py
for round in 1 2; do
for v in new old; do
  if [ $v = old ]; then cp .devrun/k_f138.py rope/_triton_kernels.py; else cp /tmp/k_new.py rope/_triton_kernels.py; fi
  timeout 100 python -m scripts.bench_rope --variant full --head-dims --head-dim-list 18,30,50,130,254 --ropes triton_v4 --no-liger --no-compiled --out $OUT/full_${v}_$round > $OUT/full_${v}_$round.log 2>&1
  echo "== $v round $round"; grep -E "D=.*fwd" $OUT/full_${v}_$round.log | sed 's/.*D=/D=/' | sed 's/(build+compile [0-9.]* s)//'
  timeout 60 python -m scripts.bench_rope --head-dims --head-dim-list 28,44 --ropes triton_v4 --no-liger --no-compiled --out $OUT/hd_${v}_$round > $OUT/hd_${v}_$round.log 2>&1
  grep -E "D=.*fwd" $OUT/hd_${v}_$round.log | sed 's/.*D=/D=/' | sed 's/(build+compile [0-9.]* s)//'
done
done
cp /tmp/k_new.py rope/_triton_kernels.py
cd $OUT && tar czf res.tgz full_* hd_* && rm -rf full_new_* full_old_* hd_new_* hd_old_*
