"""Benchmarks of trainer-cli against a plain PyTorch loop: figures, not tests (``make bench``)."""
