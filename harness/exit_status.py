"""The exit statuses of `pytest suites/` and of every `specgate` command, in one place:
README's table lists exactly these (tests/test_exit_status.py checks that the two agree).
They are pytest's own, so CI reads a specgate command as it reads a pytest run."""

PASSED = 0       # every test and gate passed
FAILED = 1       # a gate or check failed, or an arm could not be measured
INTERRUPTED = 2  # Ctrl-C or SIGTERM: servers stopped, what had finished kept
MISTAKE = 4      # a config or usage mistake, or a run that cannot start here (pytest's usage error)
# nothing failed, but a change the size of a regression could not be decided (gate.undecided=exit):
# not a pass, and CI can tell it from one (pytest's own statuses end at 5)
UNDECIDED = 6

STATUSES = (PASSED, FAILED, INTERRUPTED, MISTAKE, UNDECIDED)
