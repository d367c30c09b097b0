"""Empirical privacy: one-run and many-run audits, their bounds (Steinke et al., f-DP), threshold strategies, mechanism checks and the simulated mechanisms they are tested on."""
