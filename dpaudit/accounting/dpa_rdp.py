"""dp_accounting RDP accountant (an RDP implementation independent of Opacus')."""

from dp_accounting.rdp import RdpAccountant

from dpaudit.accounting.dpa_pld import to_dp_event
from dpaudit.accounting.events import SubsampledGaussian


def epsilon(events: list[SubsampledGaussian], delta: float) -> float:
    acc = RdpAccountant()
    acc.compose(to_dp_event(events))
    return float(acc.get_epsilon(delta))
