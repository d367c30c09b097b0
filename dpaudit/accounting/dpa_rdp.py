"""dp_accounting RDP accountant (an RDP implementation independent of Opacus'). Upper bound only.

Poisson sampling under add/remove neighbours; a ``shuffle`` sampler (fixed-size batches) as sampling without
replacement (Wang, Balle, Kasiviswanathan 2019), which dp_accounting analyses under replace-one neighbours.
"""

import dp_accounting
from dp_accounting.privacy_accountant import NeighboringRelation
from dp_accounting.rdp import RdpAccountant

from dpaudit.accounting.dpa_pld import to_dp_event
from dpaudit.accounting.events import NotApplicable, SubsampledGaussian, require


def epsilon(events: list[SubsampledGaussian], delta: float) -> float:
    return interval(events, delta)[1]


def interval(events, delta: float, relation: str = "add_remove", dataset_size=None) -> tuple:
    if any(ev.sampler == "shuffle" for ev in events):
        require(events, ("shuffle",), "dp_accounting RDP (sampling without replacement)", relation,
                ("replace_one",))
        if not dataset_size:
            raise NotApplicable("sampling without replacement needs the card's mechanism.dataset_size")
        acc = RdpAccountant(neighboring_relation=NeighboringRelation.REPLACE_ONE)
        for ev in events:
            batch = max(1, round(ev.sample_rate * dataset_size))
            acc.compose(dp_accounting.SelfComposedDpEvent(dp_accounting.SampledWithoutReplacementDpEvent(
                int(dataset_size), batch, dp_accounting.GaussianDpEvent(ev.noise_multiplier)), ev.steps))
        return None, float(acc.get_epsilon(delta)), ("upper bound only; each step a batch of q*N records drawn "
                                                     "without replacement (replace-one)")
    require(events, ("poisson",), "dp_accounting RDP", relation)
    acc = RdpAccountant()
    acc.compose(to_dp_event(events))
    return None, float(acc.get_epsilon(delta)), "upper bound only"
