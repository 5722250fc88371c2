"""A folder of run records read as a history: each headline metric of each arm over time,
with its change points (changepoints.py: E-divisive means with a permutation test, numpy
only), the folder read leniently (folder.py: torn or unfinished members skipped with a note,
runs ordered by start time, one experiment) and `specgate history` (report.py: the table per
arm and the HTML page with one plot per arm and metric). The reference-run gate takes its
reference runs from `History.since_last_change`.
"""
