set -x
mkdir -p $OUT/r
nvidia-smi --query-gpu=name,uuid --format=csv > $OUT/r/gpu.txt
git rev-parse HEAD > $OUT/r/commit.txt; git diff > $OUT/r/hack.diff
DIMS=54,90,134,182,198,214,128
python .devrun/s33/tail_probe.py hack $DIMS "none;660,4;1320,4;2640,4;1320,8;2640,2;5280,4" 2>&1 | grep -v -i warn | tee $OUT/r/hack.txt
(cd .devrun/orig && python ../s33/tail_probe.py orig $DIMS none 2>&1 | grep -v -i warn | tee $OUT/r/orig.txt)
