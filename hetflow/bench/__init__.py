"""Benchmarks: they measure speed; tests check behaviour. Results go to stdout and bench_out/."""
