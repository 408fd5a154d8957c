"""IteraGPU Lab: the least GPU rental money that buys the same, verified, ML result."""

__version__ = "0.1.0"
