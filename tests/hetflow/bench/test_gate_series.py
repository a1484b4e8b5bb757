"""The working-set gate's inputs through a probe: a sample from the services' metrics pages, and the
series' means over the trace's two halves."""

from prometheus_client import CollectorRegistry, Gauge, generate_latest

from hetflow.bench.gate_series import GateSample, GateSeries, gate_sample_of


def page(**gauges: dict[str, float]) -> str:
    registry = CollectorRegistry()
    for name, by_engine in gauges.items():
        gauge = Gauge(name, "", ["engine"] if "" not in by_engine else [], registry=registry)
        for engine, value in by_engine.items():
            (gauge.labels(engine) if engine else gauge).set(value)
    return generate_latest(registry).decode()


def test_a_sample_sums_each_gauge_over_the_engines_and_the_pages():
    monitor = page(hetflow_monitor_resident_tokens={"e0": 1000, "e1": 500},
                   hetflow_monitor_resident_programs={"e0": 3, "e1": 1},
                   hetflow_monitor_resident_growth_tokens={"e0": 200, "e1": 40},
                   hetflow_monitor_in_flight_tokens={"e0": 99})
    balancer = page(hetflow_balancer_held_calls={"": 7})
    assert gate_sample_of([monitor, balancer]) == GateSample(1500, 4, 7, 240)
    assert gate_sample_of([monitor]) == GateSample(1500, 4, 0, 240)


def test_the_series_means_split_the_trace_in_two_halves():
    series = GateSeries()
    for t, tokens, held in ((0, 100, 0), (10, 300, 2), (20, 500, 4), (30, 700, 6), (40, 900, 8)):
        series.add(t, GateSample(tokens, tokens / 100, held))
    means = series.to_row(40.0)["means"]
    assert means["resident_tokens"] == {"first_half": 200, "second_half": 600}
    assert means["held_calls"] == {"first_half": 1, "second_half": 5}
    assert series.to_row(40.0)["series"]["t_s"] == [0, 10, 20, 30, 40]
