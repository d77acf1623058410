#!/usr/bin/env bash
# Session 19, call 1: where the compiled seed004 step's extra time with triton_v4 goes (Inductor's generated code,
# the profile, host vs GPU time); the R2 = 4 mod 8 family (D = 24, 40, ..., 248, the chunk tiling by default) with
# the flat tiling's joint programs, paired tables and blocks of 4.
set -u
cd "$(dirname "$0")/.."
[ -d /tmp/site/hydra ] || bash .whl_slim/install.sh > /tmp/inst.log 2>&1
export PYTHONPATH=/tmp/site:$PWD PYTHONUNBUFFERED=1
T0=$(date +%s)
mkdir -p $OUT/r
nvidia-smi --query-gpu=name,uuid --format=csv,noheader | tee $OUT/r/gpu.txt; cp .devrun/commit.txt $OUT/r/
show() { grep -E "D=.*fwd" $1 | sed 's/.*D=/D=/' | sed 's/(build+compile [0-9.]* s)//; s/fwd\/bwd % copy  //; s/triton_v4//g' | sed "s/^/$2 /"; }
TORCH_LOGS=output_code timeout 200 python -m scripts.profile_step --model seed004 --ropes none,torch,triton_v4 \
  > $OUT/r/profile.txt 2> $OUT/r/output_code.txt
tail -n 60 $OUT/r/profile.txt; echo "at $(( $(date +%s) - T0 )) s"
timeout 150 python .devrun/s19/step_anatomy.py --rounds 8 --per 20 > $OUT/r/anatomy.txt 2>&1
tail -n 4 $OUT/r/anatomy.txt; echo "at $(( $(date +%s) - T0 )) s"
M="triton_v4,triton_v4@flat+joint+paired,triton_v4@flat+joint+split,triton_v4@flat+joint+block=4,triton_v4@flat+apart+block=4"
for v in full partial; do
  timeout 200 python -m scripts.bench_rope --budget-s 190 --head-dims --variant $v \
    --head-dim-list 24,40,56,72,88,104,120,136,152,168,184,200,216,232,248 \
    --ropes "$M" --no-compiled --no-liger --out $OUT/r/r4_$v > $OUT/r/r4_$v.log 2>&1
  show $OUT/r/r4_$v.log $v; echo "at $(( $(date +%s) - T0 )) s"
done
cd $OUT && tar czf res.tgz r && rm -rf r
