#!/usr/bin/env bash
# Session 25, call 7: how the profiler links device events to CPU events (link_probe.py).
set -u
cd "$(dirname "$0")/.."
[ -d /tmp/site/hydra ] || bash .whl_slim/install.sh > /tmp/inst.log 2>&1
export PYTHONPATH=/tmp/site:$PWD PYTHONUNBUFFERED=1
mkdir -p $OUT/r
cp .devrun/commit.txt $OUT/r/
timeout 200 python .devrun/s25/link_probe.py > $OUT/r/link_probe.txt 2>&1
head -c 9000 $OUT/r/link_probe.txt
cd $OUT && tar czf res.tgz r && rm -rf r
