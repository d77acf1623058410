mkdir -p $OUT/r
nvidia-smi --query-gpu=name,uuid --format=csv > $OUT/r/gpu.txt
git rev-parse HEAD > $OUT/r/commit.txt; git diff > $OUT/r/change.diff
DIMS=54,90,134,182,198,214,128,48,56,64
for i in 1 2; do
python .devrun/s33/tail_probe.py new$i $DIMS none 2>&1 | grep -v -i warn | tee -a $OUT/r/new.txt
(cd .devrun/orig && python ../s33/tail_probe.py orig$i $DIMS none 2>&1 | grep -v -i warn | tee -a $OUT/r/orig.txt)
done
