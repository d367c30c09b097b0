"""Run one job of a GitHub Actions workflow here, without the hosted runner: its ``run:`` steps in order, in a copy
of a folder standing for the user's repository, each with bash -e (the runner's default shell) and the workflow's and
step's ``env``. The ``uses:`` steps are the runner's: ``actions/checkout`` copies REPO into the job's folder,
``actions/setup-python`` creates a fresh virtual environment there (first on PATH), the others (uploads) are skipped
and said so. ``--sub OLD=NEW`` replaces text in the run lines, printed, for what this machine cannot reach (the
PyTorch index). The first failing step ends the job with its exit status. As on the runner, each ``run:`` step gets
its own empty ``$GITHUB_STEP_SUMMARY`` file and ``$GITHUB_WORKSPACE`` is the checkout; the steps' summaries are
joined, in order, into DIR/summary.md (the job's summary page).

    python .ci/run_workflow.py examples/github-actions.yml JOB --repo FOLDER --work DIR [--env K=V] [--sub OLD=NEW]
"""

from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
import venv
from pathlib import Path

import yaml


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("workflow", type=Path)
    ap.add_argument("job")
    ap.add_argument("--repo", type=Path, required=True, help="The folder actions/checkout brings.")
    ap.add_argument("--work", type=Path, required=True, help="A new folder for the job (must not exist).")
    ap.add_argument("--env", action="append", default=[], metavar="K=V", help="Override a workflow env value.")
    ap.add_argument("--sub", action="append", default=[], metavar="OLD=NEW", help="Replace text in run lines.")
    args = ap.parse_args(argv)
    flow = yaml.safe_load(args.workflow.read_text())
    job = flow["jobs"][args.job]
    env = {**os.environ, **{k: str(v) for k, v in (flow.get("env") or {}).items()}}
    env.update(kv.split("=", 1) for kv in args.env)
    subs = [s.split("=", 1) for s in args.sub]
    work = args.work.resolve()
    work.mkdir(parents=True)
    for i, step in enumerate(job["steps"], 1):
        name = step.get("name") or step.get("uses") or f"step {i}"
        uses = step.get("uses", "")
        if uses.startswith("actions/checkout"):
            shutil.copytree(args.repo, work / "repo")
            print(f"[{args.job}] {name}: copied {args.repo}", flush=True)
        elif uses.startswith("actions/setup-python"):
            venv.create(work / "python", with_pip=True)
            env["PATH"] = f"{work / 'python' / 'bin'}{os.pathsep}{env['PATH']}"
            env.pop("PYTHONPATH", None)
            print(f"[{args.job}] {name}: a fresh virtual environment", flush=True)
        elif uses:
            print(f"[{args.job}] {name}: skipped (the hosted runner's)", flush=True)
        else:
            script = step["run"]
            for old, new in subs:
                if old in script:
                    print(f"[{args.job}]   (here: {old!r} -> {new!r})", flush=True)
                    script = script.replace(old, new)
            print(f"[{args.job}] {name}\n    " + script.strip().replace("\n", "\n    "), flush=True)
            step_summary = work / "summaries" / f"step-{i:02d}.md"
            step_summary.parent.mkdir(exist_ok=True)
            step_summary.touch()
            step_env = {**env, **{k: str(v) for k, v in (step.get("env") or {}).items()},
                        "GITHUB_STEP_SUMMARY": str(step_summary), "GITHUB_WORKSPACE": str(work / "repo")}
            rc = subprocess.run(["bash", "-e", "-c", script], cwd=work / "repo", env=step_env).returncode
            _join_summaries(work)
            if rc != 0:
                print(f"[{args.job}] step {name!r} failed with exit {rc}", file=sys.stderr)
                return rc
    print(f"[{args.job}] ok", flush=True)
    return 0


def _join_summaries(work: Path) -> None:
    """The job's summary page: every step's summary file, in step order (as the runner shows them)."""
    parts = sorted((work / "summaries").glob("step-*.md"))
    (work / "summary.md").write_text("".join(p.read_text() for p in parts))


if __name__ == "__main__":
    sys.exit(main())
