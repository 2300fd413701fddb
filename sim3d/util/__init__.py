"""Process and file utilities every layer may use: output files that cannot be hijacked or
torn (`safe_files`), child processes that die with their parent (`lifetime`), the cyclic
garbage collector paused around allocation-heavy code (`gc_control`).

Below every domain package: nothing here imports from sim3d outside this package, so any
module, the lowest included, can use these without pulling in the simulator.
"""
