"""Summary, traces, plots and comparisons of simulated and executed steps."""
