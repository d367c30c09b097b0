"""Opacus RDP accountant (Mironov et al. 2019 subsampled Gaussian; Canonne-Kamath-Steinke conversion).

Opacus' own analysis module, loaded without torch (:mod:`.opacus_modules`). An upper bound only (RDP gives
no lower value of the true epsilon); add/remove neighbours, Poisson sampling.
"""

from dpaudit.accounting import opacus_modules
from dpaudit.accounting.events import SubsampledGaussian, require

ORDERS = [1 + x / 10.0 for x in range(1, 100)] + list(range(11, 64)) + [80, 128, 256, 512]
INTEGER_ORDERS = list(range(2, 64)) + [80, 128, 256, 512]  # closed form, fast; a (slightly looser) valid bound


def epsilon(events: list[SubsampledGaussian], delta: float, orders=ORDERS) -> float:
    require(events, ("poisson",), "Opacus RDP", "add_remove")
    _rdp = opacus_modules.module("accountants.analysis.rdp")  # without torch (accounting/opacus_modules.py)
    total = [0.0] * len(orders)
    for ev in events:
        r = _rdp.compute_rdp(q=ev.sample_rate, noise_multiplier=ev.noise_multiplier, steps=ev.steps,
                             orders=orders)
        total = [a + b for a, b in zip(total, r)]
    eps, _ = _rdp.get_privacy_spent(orders=orders, rdp=total, delta=delta)
    return float(eps)


def interval(events, delta: float, relation: str = "add_remove", dataset_size=None) -> tuple:
    require(events, ("poisson",), "Opacus RDP", relation)
    return None, epsilon(events, delta), "upper bound only"
