"""specgate: a declarative, config-driven test harness for LLM inference servers."""

__version__ = "0.1.0"
