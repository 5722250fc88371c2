"""The load: prompts (:mod:`.prompts`) x arrivals (:mod:`.arrivals`) x a request function
per API (:mod:`.requests`), typed once as a :class:`LoadPlan` (:mod:`.plan`) and run by
:func:`run_load` (:mod:`.runner`; one event loop's load in :mod:`.loop`, a load over
several processes in :mod:`.processes`) into a
:class:`LoadResult` of :class:`RequestRecord` s (:mod:`.records`), with a live progress
line (:mod:`.progress`).

Never a config tree beyond what the caller hands it.
"""

from harness.load.progress import ProgressSnapshot, print_progress
from harness.load.records import LoadResult, RequestRecord
from harness.load.loop import LoadInterrupted
from harness.load.plan import LoadPlan
from harness.load.runner import run_load

__all__ = ["LoadInterrupted", "LoadPlan", "LoadResult", "ProgressSnapshot", "RequestRecord", "print_progress", "run_load"]
