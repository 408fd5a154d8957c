"""The slack of every comparison of a measured value with a threshold or a bound: floating-point sums, never a
real margin. Held here, below every stage, so that the verdict's parts and the protocol's rules share one value."""

from __future__ import annotations

__all__ = ["TOL"]

#: Slack of every comparison with a threshold or a bound (floating-point sums, never a real margin).
TOL = 1e-12
