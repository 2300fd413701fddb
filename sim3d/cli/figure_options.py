"""The figure options of every command that draws (run, schedule, sweep, goodput, study): one
name, help text and check each, so that what a user learnt on one command holds on the others.
`study` has no --title: it writes ten figures, each titled by its rule and verdict.

Default width: a command draws its figure to be looked at on a screen first, so `--size`
defaults to screen; `study` alone defaults to page, since it writes a paper's report (its
committed figures are page-wide) rather than a figure to look at."""

from __future__ import annotations

from pathlib import Path

import typer

from .support import BadInput

SIZE_WORDS = "screen (11 in), page (a paper's text width, 7.16 in) or column (3.5 in)"
DEFAULT_SIZE_RULE = "Figures to look at default to screen; study's, written for a paper, to page."


def size_option(default: str, figure: str, former_name: str | None = None):
    """--size, for the figure(s) the command draws; `former_name`: the option's old name, still
    accepted so that scripts keep working."""
    names = ["--size"] + ([former_name] if former_name else [])
    former = f" ({former_name} is its former name)" if former_name else ""
    return typer.Option(default, *names, metavar="SIZE",
                        help=f"Width of {figure}: {SIZE_WORDS}; the fonts scale with it{former}. "
                        f"{DEFAULT_SIZE_RULE}")


def pdf_option(figure_as_pdf: str):
    return typer.Option(False, "--pdf", help=f"Also write {figure_as_pdf}, its text kept as text (for papers).")


def force_option(what: str = "an output file"):
    return typer.Option(False, "--force", help=f"Replace {what} that sim3d did not write (by default such a file "
                        "is left alone and the command refused).")


def title_option(figure: str, default: str):
    return typer.Option(None, "--title", help=f"Title over {figure} (default: {default}); '' for none, when a "
                                              "paper's caption says it.")


def check_size(size: str) -> str:
    """`size`, refused before any work unless it is one of the widths."""
    from ..report.gantt_sizes import SIZES
    if size not in SIZES:
        raise BadInput(f"--size {size!r}: expected one of {', '.join(SIZES)}")
    return size


def with_pdf(path: Path, pdf: bool) -> list[Path]:
    """`path` and, with --pdf, the same path ending in .pdf (once, if it already does)."""
    return [path] + ([path.with_suffix(".pdf")] if pdf and path.suffix.lower() != ".pdf" else [])
