"""Engine backends behind one interface: ``sim`` (the engine model in real time) and ``vllm``."""
