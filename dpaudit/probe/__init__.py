"""White-box probes for any DP training loop (docs/probe.md): :func:`attach` one to an Opacus DP optimizer, make a
:class:`FunctionalProbe` for any other DP step (two calls around the noise), or
add :class:`dpaudit.probe.hf.ProbeCallback` to a Hugging Face ``Trainer``. Importing the package imports no
torch (the evaluation reads probe records with :mod:`dpaudit.probe.record` alone)."""

__all__ = ["FunctionalProbe", "Probe", "attach"]


def __getattr__(name):
    if name == "FunctionalProbe":
        from dpaudit.probe import functional

        return functional.FunctionalProbe
    if name in __all__:
        from dpaudit.probe import probe

        return getattr(probe, name)
    raise AttributeError(name)
