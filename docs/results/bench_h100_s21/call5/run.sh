#!/usr/bin/env bash
# Session 21, call 5: every odd half from D = 54 to 254 (and rows at 48, 64, 128), forward and backward on three
# input pairs each (.devrun/s21/placement3.py), at the default (the library tree of fa4d571).
set -u
cd "$(dirname "$0")/.."
[ -d /tmp/site/hydra ] || bash .whl_slim/install.sh > /tmp/inst.log 2>&1
export PYTHONPATH=/tmp/site:$PWD PYTHONUNBUFFERED=1
mkdir -p $OUT/r
nvidia-smi --query-gpu=name,uuid --format=csv,noheader | tee $OUT/r/gpu.txt; cp .devrun/commit.txt $OUT/r/
DL=48,64,128,$(seq -s, 54 4 254)
timeout 560 python .devrun/s21/placement3.py $DL 2>&1 | tee $OUT/r/placement3.txt
cd $OUT && tar czf res.tgz r && rm -rf r
