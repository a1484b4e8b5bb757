"""Cascadia's deployment planner (issue 15): parallelism per allocation, the MILP over allocations,
the Chebyshev-guided threshold search and the bi-level loop that joins them (Cascadia 3, appendix D)."""
