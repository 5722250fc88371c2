"""specgate: a declarative, config-driven test harness for LLM inference servers."""

from pathlib import Path

__version__ = "0.1.0"

# The checkout: what `${project_root:}` names, where conf/, suites/ and make install's
# venvs and tiny models are, and what a relative path in a config (a dataset, a tokenizer)
# is relative to.
PROJECT_ROOT = Path(__file__).resolve().parent.parent
SUITES_DIR = PROJECT_ROOT / "suites"


def project_path(value) -> Path:
    """A config's path: absolute as given (``~`` expanded), else the project's."""
    path = Path(value).expanduser()
    return path if path.is_absolute() else PROJECT_ROOT / path
