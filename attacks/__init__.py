"""Membership attacks: one module per family, each returning one float per sample (higher = member)."""
