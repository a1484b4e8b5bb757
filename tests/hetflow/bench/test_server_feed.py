"""The server-feed bench's burst: fixed by a rule before any way runs, the same for every way."""

from __future__ import annotations

from hetflow.bench.server_feed import burst


def test_the_burst_is_the_rule_and_the_same_every_time():
    calls = burst(42)
    assert calls == burst(42) and len(calls) == 42
    assert [tokens for _, tokens in calls[:3]] == [20, 57, 94]
    assert calls[40][1] == 20 + (37 * 40) % 600
    assert calls[1][0].count("Tell me a story") == 6 and calls[39][0].count("Tell me a story") == 44
    assert calls[40][0].count("Tell me a story") == 5 and "number 40." in calls[40][0]  # lengths cycle every 40
    assert len({prompt for prompt, _ in calls}) == 42  # no two calls share a prompt


def test_an_unknown_way_is_one_line_naming_the_known_ones_before_any_server_starts(capsys):
    import pytest

    from hetflow.bench.server_feed import main

    with pytest.raises(SystemExit) as ended:
        main(["--ways", "server,nope"])
    assert ended.value.code == 2
    assert "unknown way(s) nope; known: server, backend, engine, stack" in capsys.readouterr().err
