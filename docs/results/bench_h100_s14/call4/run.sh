#!/usr/bin/env bash
# Session 14, call 4: the final code. Host overhead (with the new autograd-floor column); variant=full odd halves
# at 256M beside Liger (all 60); what session 13's calls cut: partial 256M D = 240-252, variant=full D = 0 mod 4
# from 216 to 256 at 32M beside Liger and compiled torch.
set -u
cd "$(dirname "$0")/.."
[ -d /tmp/site/hydra ] || bash .whl_slim/install.sh > /tmp/inst.log 2>&1
export PYTHONPATH=/tmp/site:$PWD PYTHONUNBUFFERED=1
T0=$(date +%s)
mkdir -p $OUT/r
timeout 100 python -m scripts.bench_rope --overhead --ropes triton_v4 --out $OUT/r/ovh > $OUT/r/ovh.log 2>&1
grep -E "^\|" $OUT/r/ovh/overhead.md
echo "at $(( $(date +%s) - T0 )) s"
ODD=$(python -c "print(','.join(str(d) for d in range(18, 257, 4)))")
timeout 250 python -m scripts.bench_rope --budget-s 235 --variant full --head-dims --head-dim-list $ODD --elements 256M \
  --ropes triton_v4 --no-compiled --out $OUT/r/odd256 > $OUT/r/odd256.log 2>&1
grep -E "D=.*fwd" $OUT/r/odd256.log | sed 's/.*D=/D=/' | sed 's/(build+compile [0-9.]* s)//; s/fwd\/bwd % copy  //' | sed 's/^/o256 /'
echo "at $(( $(date +%s) - T0 )) s"
timeout 40 python -m scripts.bench_rope --head-dims --head-dim-list 240,244,248,252 --elements 256M --ropes triton_v4 \
  --no-compiled --out $OUT/r/p256 > $OUT/r/p256.log 2>&1
grep -E "D=.*fwd" $OUT/r/p256.log | sed 's/.*D=/D=/' | sed 's/(build+compile [0-9.]* s)//; s/fwd\/bwd % copy  //' | sed 's/^/p256 /'
echo "at $(( $(date +%s) - T0 )) s"
timeout $(( 585 - $(date +%s) + T0 )) python -m scripts.bench_rope --budget-s $(( 570 - $(date +%s) + T0 )) --variant full \
  --head-dims --head-dim-list 216,220,224,228,232,236,240,244,248,252,256 --ropes triton_v4 --out $OUT/r/f32 > $OUT/r/f32.log 2>&1
grep -E "D=.*fwd" $OUT/r/f32.log | sed 's/.*D=/D=/' | sed 's/(build+compile [0-9.]* s)//; s/fwd\/bwd % copy  //' | sed 's/^/f32 /'
echo "at $(( $(date +%s) - T0 )) s"
cd $OUT && tar czf res.tgz r && rm -rf r
