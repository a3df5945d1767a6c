"""A small non-negative, ridge-regularised weighted least squares, in plain Python (the service runs without
numpy): the calibration of a few step-time terms on a few hundred runs needs no more.

Fits work from sufficient statistics (``Stats``: the weighted Gram matrix and right-hand side of a set of rows),
so leaving one layout's runs out is a subtraction, not a pass over every run again.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Sequence


@dataclass
class Stats:
    gram: list[list[float]]
    rhs: list[float]
    weight: float = 0.0

    @classmethod
    def zero(cls, k: int) -> "Stats":
        return cls([[0.0] * k for _ in range(k)], [0.0] * k)

    def add_row(self, x: Sequence[float], y: float, w: float) -> None:
        for a, xa in enumerate(x):
            if xa:
                self.rhs[a] += w * xa * y
                row = self.gram[a]
                for b, xb in enumerate(x):
                    row[b] += w * xa * xb
        self.weight += w

    def __add__(self, other: "Stats") -> "Stats":
        return Stats([[p + q for p, q in zip(r, s)] for r, s in zip(self.gram, other.gram)],
                     [p + q for p, q in zip(self.rhs, other.rhs)], self.weight + other.weight)

    def __sub__(self, other: "Stats") -> "Stats":
        return Stats([[p - q for p, q in zip(r, s)] for r, s in zip(self.gram, other.gram)],
                     [p - q for p, q in zip(self.rhs, other.rhs)], self.weight - other.weight)


def _solve(matrix: list[list[float]], rhs: list[float]) -> list[float]:
    """Gauss-Jordan with partial pivoting; the ridge keeps the matrix positive definite, so it is regular."""
    n = len(rhs)
    a = [row[:] + [rhs[i]] for i, row in enumerate(matrix)]
    for col in range(n):
        pivot = max(range(col, n), key=lambda r: abs(a[r][col]))
        a[col], a[pivot] = a[pivot], a[col]
        div = a[col][col] or 1e-300
        a[col] = [v / div for v in a[col]]
        for r in range(n):
            if r != col and a[r][col]:
                factor = a[r][col]
                a[r] = [v - factor * p for v, p in zip(a[r], a[col])]
    return [a[i][n] for i in range(n)]


def nonnegative_ridge(stats: Stats, prior: Sequence[float], penalty: Sequence[float]) -> list[float]:
    """θ >= 0 minimising Σ w_i (x_i·θ - y_i)² + Σ_k penalty_k (θ_k - prior_k)²: the unconstrained solution on the
    free coefficients, the most negative one fixed at 0 and the rest solved again (an active set, <= k rounds)."""
    k = len(prior)
    free = list(range(k))
    theta = [0.0] * k
    for _ in range(k + 1):
        gram = [[stats.gram[a][b] + (penalty[a] if a == b else 0.0) for b in free] for a in free]
        rhs = [stats.rhs[a] + penalty[a] * prior[a] for a in free]
        theta = [0.0] * k
        for a, value in zip(free, _solve(gram, rhs) if free else []):
            theta[a] = value
        negative = [a for a in free if theta[a] < 0]
        if not negative:
            return theta
        free.remove(min(negative, key=lambda a: theta[a]))
    return [max(v, 0.0) for v in theta]
