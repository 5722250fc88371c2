"""The load: prompts (:mod:`.prompts`) x arrivals (:mod:`.arrivals`) x a request function
per API (:mod:`.requests`), wired by :func:`run_load` (:mod:`.runner`) into a
:class:`LoadResult` of :class:`RequestRecord` s (:mod:`.records`), with a live progress
line (:mod:`.progress`).

May import: servers (the HTTP client). Never a config tree beyond what the caller hands it.
"""

from harness.load.progress import ProgressSnapshot, print_progress
from harness.load.records import LoadResult, RequestRecord
from harness.load.runner import LoadInterrupted, run_load

__all__ = ["LoadInterrupted", "LoadResult", "ProgressSnapshot", "RequestRecord", "print_progress", "run_load"]
