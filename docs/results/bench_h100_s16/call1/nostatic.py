# ruff: noqa  (a record of what ran on the H100, kept as it ran)
"""pytest plugin: Inductor launches rope_kernel with Triton's own launcher (no static launcher)."""
import rope.triton_rope as t
t._TritonRotary.inductor_options = {}
