#!/usr/bin/env bash
# Session 16, call 3: the R2 = 2 mod 8 family (D = 36 + 16k; flat tiling, 38 registers with its default elements and
# split tables, 32 with words and paired tables under triton 3.6): default and words+paired side by side, both
# variants, 32M; then 256M at four dims.
set -u
cd "$(dirname "$0")/.."
[ -d /tmp/site/hydra ] || bash .whl_slim/install.sh > /tmp/inst.log 2>&1
export PYTHONPATH=/tmp/site:$PWD PYTHONUNBUFFERED=1
T0=$(date +%s)
mkdir -p $OUT/r
FAM=$(python -c "print(','.join(str(d) for d in range(36, 257, 16)))")
for V in partial full; do
  timeout 200 python -m scripts.bench_rope --budget-s 190 --variant $V --head-dims --head-dim-list $FAM \
    --ropes "triton_v4,triton_v4@words+paired" --no-compiled --no-liger --out $OUT/r/fam_$V > $OUT/r/fam_$V.log 2>&1
  grep -E "D=.*fwd" $OUT/r/fam_$V.log | sed 's/.*D=/D=/' | sed 's/(build+compile [0-9.]* s)//; s/fwd\/bwd % copy  //' | sed "s/^/$V /"
  echo "at $(( $(date +%s) - T0 )) s"
done
timeout $(( 585 - $(date +%s) + T0 )) python -m scripts.bench_rope --budget-s $(( 570 - $(date +%s) + T0 )) --variant partial \
  --head-dims --head-dim-list 36,100,164,244 --elements 256M --ropes "triton_v4,triton_v4@words+paired" --no-compiled \
  --no-liger --out $OUT/r/fam256 > $OUT/r/fam256.log 2>&1
grep -E "D=.*fwd" $OUT/r/fam256.log | sed 's/.*D=/D=/' | sed 's/(build+compile [0-9.]* s)//; s/fwd\/bwd % copy  //' | sed "s/^/256M /"
echo "at $(( $(date +%s) - T0 )) s"
cd $OUT && tar czf res.tgz r && rm -rf r
