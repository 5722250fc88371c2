"""`specgate schedule SWEEP_DIR`: from a sweep over concurrency x number of draft tokens (k),
per concurrency the fastest k with its interval (or plain decoding), whether that choice is
decided or within noise, and the schedule in the forms the engines take.

    grid.py       the sweep read back: per concurrency, the plain arm and each k's arm (bad input: one sentence)
    choice.py     per concurrency: the candidates' speedups, their intervals, the choice
    ranges.py     the choices as batch-size ranges, one k each
    write.py      schedule.json and schedule.md, atomically, into the sweep's folder
    make.py       the command: all of the above, or one sentence and nothing written

Reads records; starts nothing.
"""
