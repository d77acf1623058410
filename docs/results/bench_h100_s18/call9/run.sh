#!/usr/bin/env bash
# Session 18, call 9 (given inline to the device tool, kept here as it ran; on call 8's machine): the 15 head dims
# under 93% in the report's 32M sweeps, again (triton_v4 beside Liger).
export PYTHONPATH=/tmp/site:$PWD PYTHONUNBUFFERED=1; mkdir -p $OUT/r; nvidia-smi --query-gpu=uuid --format=csv,noheader; for V in full partial; do L=40,54,56,86,90,98,114,152,154,182,206; [ $V = partial ] && L=24,56,180,232; timeout 120 python -m scripts.bench_rope --budget-s 110 --variant $V --head-dims --head-dim-list $L --ropes triton_v4 --no-compiled --out $OUT/r/re_$V > $OUT/r/re_$V.log 2>&1; grep -E "D=.*fwd" $OUT/r/re_$V.log | sed 's/.*D=/D=/; s/(build+compile [0-9.]* s)//; s/fwd\/bwd % copy  //' | sed "s/^/$V /"; done; cd $OUT && tar czf res.tgz r && rm -rf r
