"""Many simulations at once: what-if sweeps and layout search."""
