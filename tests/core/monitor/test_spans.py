"""Kairos 4.2: the call graph of each of figure 11's patterns, rebuilt from upstream names and
execution timestamps alone."""

from hetflow.core.monitor.spans import CallSpan, reconstruct, reconstruct_run


def spans(message_id: str, *calls: tuple[str, str, float, float]) -> list[CallSpan]:
    return [CallSpan(message_id, agent, upstream, start, end) for agent, upstream, start, end in calls]


def test_parallel_fan_out():                       # figure 11(a): A calls B, C, D at once
    run = spans("m", ("A", "", 0, 1), ("B", "A", 1, 4), ("C", "A", 1, 3), ("D", "A", 1.1, 5))
    assert reconstruct_run(run) == {"A": (("B", "C", "D"),)}


def test_sequential_fan_out_is_not_a_chain():      # figure 11(c): A calls B, then C, then D
    run = spans("m", ("A", "", 0, 1), ("B", "A", 1, 2), ("C", "A", 2, 3), ("D", "A", 3, 4))
    graph = reconstruct_run(run)
    assert graph == {"A": (("B",), ("C",), ("D",))}
    assert "B" not in graph and "C" not in graph     # timestamps alone would read A -> B -> C -> D


def test_mixed_groups_found_by_the_sweep_line():   # figure 11(b)/(d): two in parallel, then one
    run = spans("m", ("A", "", 0, 1), ("B", "A", 1, 3), ("C", "A", 1.5, 2.5), ("D", "A", 3.2, 4), ("E", "D", 4, 5))
    assert reconstruct_run(run) == {"A": (("B", "C"), ("D",)), "D": (("E",),)}


def test_chain():
    run = spans("m", ("A", "", 0, 1), ("B", "A", 1, 2), ("C", "B", 2, 3))
    assert reconstruct_run(run) == {"A": (("B",),), "B": (("C",),)}


def test_patterns_are_counted_across_runs_and_runs_are_kept_apart():
    runs = (spans("m1", ("A", "", 0, 1), ("B", "A", 1, 3), ("C", "A", 1, 3))
            + spans("m2", ("A", "", 0.5, 1), ("B", "A", 1.2, 3), ("C", "A", 1.3, 3))
            + spans("m3", ("A", "", 0.5, 1), ("B", "A", 1, 2), ("C", "A", 2.5, 3)))
    graph = reconstruct(runs)
    assert graph.most_common("A") == (("B", "C"),)
    assert graph.patterns["A"][(("B",), ("C",))] == 1
    assert graph.edges() == {("A", "B"), ("A", "C")}
