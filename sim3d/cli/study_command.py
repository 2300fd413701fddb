"""`sim3d study NAME`: reproducible studies that write a report folder. One study so far,
`rules-of-thumb` (issue 38): the 3D-parallelism rules tutorials teach, each checked against
simulations, closed forms and published runs, one figure per rule and a page of verdicts."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Optional

import typer

from .figure_options import check_size, force_option, pdf_option, size_option
from .progress import progress_bars
from .support import JSON_HELP, BadInput, _print_json, _writable_folder, err, out

STUDIES = ("rules-of-thumb",)
DEFAULT_OUT = {"rules-of-thumb": Path("reports") / "rules-of-thumb"}


def study(name: str = typer.Argument(..., help="The study to run: rules-of-thumb."),
          out_dir: Optional[Path] = typer.Option(None, "--out", help="Folder for the figures, index.md and rules.json "
                                                 "(default reports/rules-of-thumb/)."),
          quick: bool = typer.Option(False, "--quick", help="Fewer sizes and models per rule (seconds, for tests); "
                                     "the verdicts may rest on fewer cases."),
          size: str = size_option("page", "each rule's figure"),
          pdf: bool = pdf_option("each figure as PDF"),
          as_json: bool = typer.Option(False, "--json", help=JSON_HELP),
          force: bool = force_option("a figure, index.md or rules.json")):
    """Run a study and write its report: rules-of-thumb checks ten 3D-parallelism guidelines."""
    if name not in STUDIES:
        raise BadInput(f"study {name!r}: expected one of {', '.join(STUDIES)}")
    check_size(size)
    from ..report.rules_page import PAGE, output_names, write_rules_report
    from ..util.ownership import refuse_foreign
    from ..util.safe_files import folder_lock, record_outputs, refuse_unsafe
    from ..studies.rules import RULES, run_rules

    folder = _writable_folder(out_dir or DEFAULT_OUT[name])
    keys = list(RULES)
    refuse_unsafe([folder / n for n in output_names(keys)])
    refuse_foreign([folder / n for n in output_names(keys)], force)
    started = time.monotonic()
    with folder_lock(folder, "study"):
        with progress_bars("study", err) as progress:
            task = progress.add_task(f"{name}{' (quick)' if quick else ''}", total=len(RULES), rule="")
            checks = run_rules(quick, progress=lambda c: progress.update(
                task, advance=1, rule=f"rule {c.number} {c.verdict}"))
        command = f"sim3d study {name}" + (" --quick" if quick else "")
        written = write_rules_report(checks, folder, size=size, pdf=pdf, quick=quick, command=command)
        record_outputs(folder, written, {"written_by": command, "size": size}, output_names(keys))
    wall = time.monotonic() - started
    if as_json:
        _print_json({"study": name, "quick": quick, "wall_s": wall, "files": [str(p) for p in written],
                     "rules": [{"number": c.number, "title": c.title, "number_text": c.number_text,
                                "value": c.value, "verdict": c.verdict} for c in checks]})
        return
    from rich.table import Table
    table = Table(title=f"rules of thumb, checked{' (quick)' if quick else ''}", title_justify="left")
    for column in ("#", "rule", "number", "verdict"):
        table.add_column(column, justify="right" if column == "#" else "left", overflow="fold")
    for c in checks:
        table.add_row(str(c.number), c.title, c.number_text, c.verdict)
    out.print(table)  # prose cells fold to the terminal's width, or to 120 columns when piped
    out.print(f"wrote {PAGE} and {len(written) - 2} figures to {folder}/ in {wall:.0f} s", highlight=False)

