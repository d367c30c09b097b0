"""White-box probes for any DP training loop (docs/probe.md): :func:`attach` one to an Opacus DP optimizer, make a
:class:`FunctionalProbe` for any other DP step (two calls around the noise), or
add :class:`dpaudit.probe.hf.ProbeCallback` to a Hugging Face ``Trainer``; all four take one
:class:`ProbeSettings` value (or its fields as keywords). Importing the package imports no
torch (the evaluation reads probe records with :mod:`dpaudit.probe.record` alone)."""

__all__ = ["FunctionalProbe", "Probe", "ProbeSettings", "attach"]


def __getattr__(name):
    if name == "ProbeSettings":
        from dpaudit.probe import settings

        return settings.ProbeSettings
    if name == "FunctionalProbe":
        from dpaudit.probe import functional

        return functional.FunctionalProbe
    if name in __all__:
        from dpaudit.probe import probe

        return getattr(probe, name)
    raise AttributeError(name)
