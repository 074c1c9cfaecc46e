"""Runs a captured training step under a plan with PyTorch (CUDA streams, or an exact CPU backend)."""
