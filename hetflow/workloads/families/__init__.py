"""Workflow families: each plans programs over real text (see docs/workloads.md)."""
