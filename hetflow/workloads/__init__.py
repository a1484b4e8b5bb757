"""Workflow traces from real data (issue 3): the record format, the models of lengths and
correctness, the workflow families and arrival processes. docs/workloads.md explains every choice."""
