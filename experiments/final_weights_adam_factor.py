"""How much of a canary row's signal DP-Adam keeps, against the plain sum of the noisy gradients (DP-SGD).

The final-weights score reads a canary's own row after T full-batch steps. With SGD the row's change is the sum of
the noisy clipped gradients, so the projection on the canary's direction separates inserted from held-out canaries
by exactly the Dirac ideal mu = sqrt(T) / sigma. Adam divides each coordinate's step by the running root mean square
of its gradients (here: noise), and its first step is a sign; this simulates both on d-dimensional rows (one unit of
clipped gradient along a unit direction per step when inserted, N(0, sigma^2) noise per coordinate) and prints the
separation d' of the projection score, as a fraction of the ideal.

    python experiments/final_weights_adam_factor.py --sigma 3.4196 --steps 10
"""

from __future__ import annotations

import argparse
import json
import math

import numpy as np


def separation(sigma: float, steps: int, d: int, m: int, adam: bool, seed: int = 0, lr: float = 1e-3) -> float:
    rng = np.random.default_rng(seed)
    signs = rng.choice([-1, 1], size=m)
    u = rng.standard_normal((m, d))
    u /= np.linalg.norm(u, axis=1, keepdims=True)
    w = np.zeros((m, d))
    m1, v2 = np.zeros((m, d)), np.zeros((m, d))
    b1, b2, eps = 0.9, 0.999, 1e-8
    for t in range(1, steps + 1):
        g = (signs[:, None] > 0) * u + sigma * rng.standard_normal((m, d))  # the noisy clipped sum on the row
        if adam:
            m1 = b1 * m1 + (1 - b1) * g
            v2 = b2 * v2 + (1 - b2) * g * g
            w += lr * (m1 / (1 - b1 ** t)) / (np.sqrt(v2 / (1 - b2 ** t)) + eps)
        else:
            w += lr * g
    s = (w * u).sum(1)
    a, b = s[signs > 0], s[signs < 0]
    return float((a.mean() - b.mean()) / math.sqrt((a.var() + b.var()) / 2))


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--sigma", type=float, required=True)
    p.add_argument("--steps", type=int, default=10)
    p.add_argument("--d", type=int, default=128)
    p.add_argument("--m", type=int, default=20000)
    a = p.parse_args(argv)
    ideal = math.sqrt(a.steps) / a.sigma
    sgd = separation(a.sigma, a.steps, a.d, a.m, adam=False)
    adam = separation(a.sigma, a.steps, a.d, a.m, adam=True)
    print(json.dumps({"sigma": a.sigma, "steps": a.steps, "ideal_mu": round(ideal, 4), "sgd_d": round(sgd, 4),
                      "adam_d": round(adam, 4), "adam_fraction_of_ideal": round(adam / ideal, 3)}))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
