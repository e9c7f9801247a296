"""msnb benchmarks: each compares msnb with the plain-TorchServe way of doing the same thing (python -m bench)."""
