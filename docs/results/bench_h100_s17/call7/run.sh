#!/usr/bin/env bash
# Session 17, call 2: why our kernels miss Inductor's static launcher.
set -u
cd "$(dirname "$0")/.."
[ -d /tmp/site/hydra ] || bash .whl_slim/install.sh > /tmp/inst.log 2>&1
export PYTHONPATH=/tmp/site:$PWD PYTHONUNBUFFERED=1
mkdir -p $OUT/r
timeout 200 python .devrun/s17/static_why.py 2>&1 | tee $OUT/r/static_why.log | grep -v "^\s*$" | tail -40
cd $OUT && tar czf res.tgz r && rm -rf r
