import subprocess
import sys
import time

from hetflow.bench.flame import flame_graphs

SPIN = ("def spin_for_the_profiler():\n    print('spinning', flush=True)\n    while True:\n"
        "        sum(i * i for i in range(10000))\nspin_for_the_profiler()\n")


def test_a_flame_graph_is_recorded_per_named_process_and_shows_where_it_spends_its_cpu(tmp_path):
    busy = subprocess.Popen([sys.executable, "-c", SPIN], stdout=subprocess.PIPE, text=True)
    try:
        assert busy.stdout is not None and busy.stdout.readline() == "spinning\n"   # recorded once it spins
        with flame_graphs({"busy": busy.pid}, tmp_path, "50") as graphs:
            time.sleep(1.0)
    finally:
        busy.kill()
        busy.wait()
    assert graphs == [tmp_path / "50-busy.svg"]
    assert "spin_for_the_profiler" in graphs[0].read_text()
