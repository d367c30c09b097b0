"""Every command's --help ends with an example to copy and its exit codes (dpaudit/cli/help.py); each example
names that command and only options it has."""

from __future__ import annotations

import shlex

import click
import pytest

from dpaudit.cli import main
from dpaudit.cli.help import EXAMPLES, ONE
from dpaudit.cli.main import cli


def _leaves(group: click.Group, prefix: str = ""):
    for name, cmd in group.commands.items():
        if isinstance(cmd, click.Group):
            yield from _leaves(cmd, f"{prefix}{name} ")
        else:
            yield f"{prefix}{name}", cmd


LEAVES = dict(_leaves(cli))


def test_every_command_has_an_example_and_no_example_is_orphaned():
    assert set(LEAVES) == set(EXAMPLES), (sorted(set(LEAVES) - set(EXAMPLES)), sorted(set(EXAMPLES) - set(LEAVES)))
    assert set(ONE) <= set(LEAVES)


@pytest.mark.parametrize("path", sorted(EXAMPLES))
def test_the_help_shows_the_example_and_the_exit_codes(path, capsys):
    assert main([*path.split(), "--help"]) == 0
    out = " ".join(capsys.readouterr().out.split())  # click wraps the epilog's prose
    assert "Example:" in out and f"dpaudit {path}" in out and "Exit codes: 0 success" in out and "2 bad input" in out
    assert ("; 1 " in out) == (path in ONE)


@pytest.mark.parametrize("path", sorted(EXAMPLES))
def test_each_example_uses_only_options_its_command_has(path):
    words = shlex.split(EXAMPLES[path])
    assert words[:1 + len(path.split())] == ["dpaudit", *path.split()]
    known = {o for p in LEAVES[path].params if isinstance(p, click.Option) for o in (*p.opts, *p.secondary_opts)}
    used = {w for w in words if w.startswith("--")}
    assert used <= known, sorted(used - known)
    required = {p.opts[0] for p in LEAVES[path].params if isinstance(p, click.Option) and p.required}
    assert required <= used, sorted(required - used)


def test_one_option_name_per_concept_the_number_of_canaries(tmp_path):
    """`--canaries` counts canaries in `audit` and in `canaries new` alike (`--m` kept for existing scripts)."""
    assert main(["canaries", "new", "--canaries", "20", "--seed", "3", "--out", str(tmp_path / "a.json")]) == 0
    assert main(["canaries", "new", "--m", "20", "--seed", "3", "--out", str(tmp_path / "b.json")]) == 0
    assert (tmp_path / "a.json").read_text() == (tmp_path / "b.json").read_text()


# the examples that need no files of the user's, in an order where each finds what an earlier one wrote (`account
# --card my-model/privacy_card.json` reads the card `card` writes)
SELF_CONTAINED = ("card", "account", "canaries new", "audit one-run", "audit many-run", "audit strategy", "audit plan",
                  "lmo search", "lmo account")


def test_the_examples_a_newcomer_can_copy_as_they_are_run(tmp_path, monkeypatch, capsys):
    """Each is run as printed and must succeed: `card`'s example once claimed ε = 8 for a mechanism that spends
    12 (σ = 0.6, q = 0.01, T = 3000), a card its own `account --card` refuted."""
    monkeypatch.chdir(tmp_path)
    (tmp_path / "my-model").mkdir()
    for path in SELF_CONTAINED:
        words = shlex.split(EXAMPLES[path])
        assert main(words[1:]) == 0, (path, capsys.readouterr().err)
    assert "verified" in capsys.readouterr().out
