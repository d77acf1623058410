"""MFU's peak looked up from the GPU's name (``train.peak_tflops=auto``): whole words of the name, the most
specific entry first, and nothing for a GPU not listed (an MFU against another GPU's peak is a wrong number, not
a missing one)."""

from __future__ import annotations

import pytest

from llm.training.runtime import known_peak


@pytest.mark.parametrize(("name", "peak"), [
    ("NVIDIA H100 80GB HBM3", 989.0),
    ("NVIDIA H100 PCIe", 756.0),
    ("NVIDIA H100 NVL", 835.0),
    ("NVIDIA H200", 989.0),
    ("NVIDIA H200 NVL", 835.0),
    ("NVIDIA A100-SXM4-80GB", 312.0),
    ("NVIDIA L4", 121.0),
    ("NVIDIA L40S", 362.0),
    ("NVIDIA GeForce RTX 4090", 165.0),
])
def test_a_listed_gpu_gets_its_datasheet_peak(name, peak):
    assert known_peak(name) == peak


@pytest.mark.parametrize("name", ["NVIDIA L40", "NVIDIA H800", "NVIDIA GeForce RTX 40900", "NVIDIA B200"])
def test_a_gpu_not_listed_gets_no_peak_not_a_neighbours(name):
    assert known_peak(name) is None
