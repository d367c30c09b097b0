"""White-box probes for any DP training loop (docs/probe.md): :func:`attach` one to an Opacus DP optimizer, or
add :class:`dpaudit.probe.hf.ProbeCallback` to a Hugging Face ``Trainer``. Importing the package imports no
torch (the evaluation reads probe records with :mod:`dpaudit.probe.record` alone)."""

__all__ = ["Probe", "attach"]


def __getattr__(name):
    if name in __all__:
        from dpaudit.probe import probe

        return getattr(probe, name)
    raise AttributeError(name)
