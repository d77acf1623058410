#!/usr/bin/env bash
# Session 12, call 8: forward/backward kernels on the same tensors (diagnosis of the R2 = 2 mod 8 backward).
set -u
cd "$(dirname "$0")/.."
[ -d /tmp/site/hydra ] || bash .whl_slim/install.sh > /tmp/inst.log 2>&1
export PYTHONPATH=/tmp/site:$PWD PYTHONUNBUFFERED=1
timeout 200 python .devrun/fwdbwd.py 2>&1 | grep -v -i warn | tee $OUT/fwdbwd.txt
