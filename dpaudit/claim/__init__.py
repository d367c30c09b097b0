"""The claim: the privacy card (``card``), a card from an Opacus run (``opacus_card``), re-deriving its epsilon
(``reaccount``), whether the claim holds (``status``) and the verdict that joins claim and evidence
(``verdict``)."""
