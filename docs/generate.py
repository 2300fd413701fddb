"""Regenerate every output the README shows, and the reports it links to.

    python docs/generate.py            # rewrite README.md's output blocks, rerun the commands
    python docs/generate.py --check    # change nothing; exit 1 naming each block that differs

Two kinds of block are generated, nothing else in the README is touched:

- a ```console block whose first line is `$ COMMAND`: the rest of the block is what COMMAND
  prints on a terminal 100 columns wide (both streams, in order, less the progress lines),
  run by bash in the repository root (`sim3d` is this Python's entry point, so a fresh
  install and this script see the same command);
- a ```python block whose info string is `python run`, followed by a ```text block: the text
  block is what the Python code prints.

The commands run in order, in the folder given (the repository root when regenerating, so
`sim3d run scenarios/gpt3.yaml` rewrites the committed reports/gpt3-175b/ exactly as a user's
run would). tests/test_readme.py runs them in a copy of the repository and compares, allowing
what a clock decides (`WALL_TIMES`) and, on the executor's loss line, the round-off its own
check allows (`ROUNDOFF_LINES`): another CPU or thread count sums in another order. A block
whose output agrees with the README's keeps the README's text, so regenerating on another
machine rewrites only what really changed.
"""

from __future__ import annotations

import argparse
import os
import re
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
README = ROOT / "README.md"
WIDTH = "100"  # rich wraps tables at the terminal's width; the README's is fixed

# What differs from one run of the same command to the next: the clock. Each pattern's
# number is masked before comparing.
WALL_TIMES = [
    re.compile(r"(actions in )[\d.]+( s)"),
    re.compile(r"(median step )[\d.]+( ms)"),
    re.compile(r"(rel |abs )[\d.]+e-\d+"),  # the executor check's errors: round-off, not a result
    re.compile(r"( )[\d,.]+/s\b"),  # a rate
]
# Lines of floating-point results that depend on the order of summation (the CPU's vector
# width, the thread count, gloo's reduction order): `sim3d execute --check` compares them with a
# float64 reference at the tolerance it prints ("check PASSED (tolerance 6.2e-02 for bf16)"), so
# two correct runs, each within that tolerance of the same reference, differ by at most twice it.
ROUNDOFF_LINES = re.compile(r"^losses: ")
CHECK_TOLERANCE = re.compile(r"^check PASSED \(tolerance ([\d.]+e[-+]\d+) for ", re.M)
NUMBER = re.compile(r"-?\d+\.\d+(?:e[-+]\d+)?")
# Progress lines (sim3d/cli/progress.py) go to standard error every few seconds off a terminal:
# how many appear depends on the machine's speed.
PROGRESS = re.compile(r"^[\w ,]+: [\d,.]+(/[\d,.]+ \(\d+%\))?( [\d,]+/s)?, \d+ s$")

# Output folders a README command continues rather than replaces (`sweep --resume`): removed
# before the commands run, so that what they hold is computed again, not read back.
FRESH = ["reports/gpt3-nic-sweep"]
# The committed reports the commands write, compared file by file by tests/test_readme.py
# (images are regenerated but not compared: their bytes depend on the fonts installed).
COMMITTED = ["reports/gpt3-175b/summary.json", "reports/gpt3-175b/trace.csv", "reports/gpt3-175b/schedule.csv",
             "reports/gpt3-175b/links.csv", "reports/gpt3-nic-sweep/results.csv", "reports/gpt3-nic-sweep/sweep.json",
             "reports/llama3.1-8b-plan-8/candidates.csv", "reports/llama3.1-8b-plan-8/finalists.csv",
             "reports/llama3.1-405b-goodput/goodput.csv", "reports/rules-of-thumb/index.md",
             "reports/rules-of-thumb/rules.json"]
# Reports the README links to but shows no output of (a bash block names the command): rerun
# after the blocks, in the same folder, so that what is committed is what the command writes.
REPORT_COMMANDS = ["sim3d study rules-of-thumb --out reports/rules-of-thumb"]
# tables whose rows are appended as parallel work finishes: compared as sets of rows
UNORDERED = ("reports/gpt3-nic-sweep/results.csv",)
# summary.json's keys that a clock decides
WALL_KEYS = ("sim_wall_s",)

BLOCK = re.compile(r"^```(console|python run)\n(.*?)^```\n(?:\n?```text\n(.*?)^```\n)?", re.M | re.S)


@dataclass
class Block:
    kind: str        # "console" or "python run"
    source: str      # the command (console) or the code (python)
    output: str      # what the README shows now
    span: tuple[int, int]


def blocks(text: str) -> list[Block]:
    found = []
    for m in BLOCK.finditer(text):
        kind, body, text_block = m.group(1), m.group(2), m.group(3)
        if kind == "console":
            first, _, rest = body.partition("\n")
            if not first.startswith("$ "):
                raise ValueError(f"a console block must start with '$ COMMAND': {first!r}")
            found.append(Block(kind, first[2:], rest, m.span()))
        else:
            if text_block is None:
                raise ValueError(f"a `python run` block needs a ```text block right after it: {body[:60]!r}")
            found.append(Block(kind, body, text_block, m.span()))
    return found


def environment() -> dict[str, str]:
    bin_dir = str(Path(sys.executable).parent)
    return dict(os.environ, COLUMNS=WIDTH, LINES="50", NO_COLOR="1", TERM="dumb",
                PATH=bin_dir + os.pathsep + os.environ.get("PATH", ""), PYTHONHASHSEED="0", PYTHONUNBUFFERED="1")


def run(block: Block, cwd: Path, extra_env: dict[str, str] | None = None) -> str:
    env = dict(environment(), **(extra_env or {}))
    if block.kind == "console":
        # one pipe for both streams, unbuffered: messages stay where the user sees them
        done = subprocess.run(["bash", "-c", block.source], cwd=cwd, env=env, stdout=subprocess.PIPE,
                              stderr=subprocess.STDOUT, text=True, timeout=600)
    else:
        done = subprocess.run([sys.executable, "-c", block.source], cwd=cwd, env=env,
                              capture_output=True, text=True, timeout=600)
        if done.returncode != 0:
            raise RuntimeError(f"the README's Python block failed:\n{done.stderr}")
    lines = [line.rstrip() for line in done.stdout.splitlines() + (done.stderr or "").splitlines()
             if not PROGRESS.match(line)]
    return "\n".join(lines).rstrip("\n") + "\n"


def masked(text: str) -> str:
    for pattern in WALL_TIMES:
        text = pattern.sub(lambda m: m.group(1) + "#", text)
    return text


def agree(fresh: str, shown: str) -> bool:
    """Whether a fresh output says what the README shows: the same text once the clock is
    masked, except that the numbers on a round-off line may differ by twice the check's
    tolerance printed in the same output (exact where the output prints none)."""
    fresh_lines, shown_lines = masked(fresh).splitlines(), masked(shown).splitlines()
    if len(fresh_lines) != len(shown_lines):
        return False
    found = CHECK_TOLERANCE.search(shown)
    rtol = 2 * float(found.group(1)) if found and CHECK_TOLERANCE.search(fresh) else 0.0
    for a, b in zip(fresh_lines, shown_lines):
        if a == b:
            continue
        if not (rtol and ROUNDOFF_LINES.match(a) and ROUNDOFF_LINES.match(b)):
            return False
        if NUMBER.sub("#", a) != NUMBER.sub("#", b):
            return False
        xs, ys = [float(x) for x in NUMBER.findall(a)], [float(y) for y in NUMBER.findall(b)]
        if any(abs(x - y) > rtol * abs(y) for x, y in zip(xs, ys)):  # relative to what is shown
            return False
    return True


def render(block: Block, output: str) -> str:
    if block.kind == "console":
        return f"```console\n$ {block.source}\n{output}```\n"
    return f"```python run\n{block.source}```\n\n```text\n{output}```\n"


def regenerate(text: str, cwd: Path, log=print) -> tuple[str, list[str]]:
    """The README text with every block's output rerun in `cwd`, and the commands whose
    output changed beyond the clock."""
    import shutil
    for folder in FRESH:
        shutil.rmtree(cwd / folder, ignore_errors=True)
    changed, pieces, last = [], [], 0
    for block in blocks(text):
        log(f"  {block.source.splitlines()[0][:90]}")
        output = run(block, cwd)
        if agree(output, block.output):
            output = block.output
        else:
            changed.append(block.source.splitlines()[0])
        pieces += [text[last:block.span[0]], render(block, output)]
        last = block.span[1]
    for command in REPORT_COMMANDS:
        log(f"  {command}")
        done = subprocess.run(["bash", "-c", command], cwd=cwd, env=environment(), capture_output=True, text=True,
                              timeout=600)
        if done.returncode != 0:
            raise RuntimeError(f"{command} failed:\n{done.stderr}")
    return "".join(pieces) + text[last:], changed


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--check", action="store_true", help="change nothing; exit 1 if a block is stale")
    args = parser.parse_args()
    text = README.read_text()
    if args.check:
        import shutil
        import tempfile
        with tempfile.TemporaryDirectory() as tmp:
            copy = Path(tmp) / "repo"
            shutil.copytree(ROOT, copy, ignore=shutil.ignore_patterns(".git", ".venv", "*.egg-info", "__pycache__"))
            _, changed = regenerate(text, copy)
    else:
        new, changed = regenerate(text, ROOT)
        README.write_text(new)
    for command in changed:
        print(f"{'stale' if args.check else 'changed'}: {command}")
    return 1 if args.check and changed else 0


if __name__ == "__main__":
    sys.exit(main())
