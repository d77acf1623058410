set -x
export PYTHONPATH=$PWD
nvidia-smi --query-gpu=name,clocks.max.mem --format=csv
python .devrun/tma_probe.py 54,214,18,90 128x8x1x1x4,128x8x0x0x4,64x16x1x1x4,256x4x1x1x4,128x16x1x1x8 2>&1 | tail -40
