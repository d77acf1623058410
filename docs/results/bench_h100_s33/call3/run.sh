mkdir -p $OUT/r
nvidia-smi --query-gpu=name,uuid --format=csv > $OUT/r/gpu.txt
git rev-parse HEAD > $OUT/r/commit.txt
DIMS=54,90,134,182,198,214,18,30,24,40,56,88,120,36,52,100,48,64,128,256,48p,80p,24p,112p
for v in orig v2 v3; do
(cd .devrun/$v && python ../s33/tail_probe.py $v $DIMS none lean 2>&1 | grep -v -i warn | tee -a $OUT/r/$v.txt)
done
