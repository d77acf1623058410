#!/usr/bin/env bash
# Session 17, call 1: where the compiled seed004 step's extra host time goes (triton_v4 vs torch): host time of the
# forward/backward/optimizer with the GPU held busy, cProfile, and Inductor's output code of both.
set -u
cd "$(dirname "$0")/.."
[ -d /tmp/site/hydra ] || bash .whl_slim/install.sh > /tmp/inst.log 2>&1
export PYTHONPATH=/tmp/site:$PWD PYTHONUNBUFFERED=1
T0=$(date +%s)
mkdir -p $OUT/r
for n in torch triton_v4 none; do
  TORCH_LOGS=output_code timeout 200 python .devrun/s17/hostprof.py $n > $OUT/r/host_$n.txt 2> $OUT/r/prof_$n.txt
  cat $OUT/r/host_$n.txt; echo "at $(( $(date +%s) - T0 )) s"
done
for V in partial full; do
  timeout 100 python -m scripts.bench_rope --budget-s 90 --variant $V --head-dims --head-dim-list 20,36,52,68 \
    --ropes "triton_v4,triton_v4@words+paired" --no-compiled --no-liger --out $OUT/r/fam_$V > $OUT/r/fam_$V.log 2>&1
  grep -E "D=.*fwd" $OUT/r/fam_$V.log | sed 's/.*D=/D=/' | sed 's/(build+compile [0-9.]* s)//; s/fwd\/bwd % copy  //' | sed "s/^/$V /"
done
echo "at $(( $(date +%s) - T0 )) s"
for n in torch triton_v4; do grep -c "\.run(" $OUT/r/prof_$n.txt; done
cd $OUT && tar czf res.tgz r && rm -rf r
