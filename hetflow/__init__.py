"""hetflow: a scheduler for multi-agent LLM workflows on heterogeneous vLLM engines."""

__version__ = "0.1.0"
