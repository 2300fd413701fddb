"""Figure sizes, without importing matplotlib (the CLI checks its options before any work):
width in inches and a font scale, for a screen and for a paper's text and column width
(IEEEtran: \\textwidth 516 pt = 7.16 in, \\columnwidth 252 pt = 3.5 in). Named for the Gantt
chart, the first figure drawn at them; every figure a command draws with `--size` uses them."""

SIZES = {"screen": (11.0, 1.0), "page": (7.16, 0.8), "column": (3.5, 0.62)}
