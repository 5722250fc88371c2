"""`specgate calibrate`: K identical whole runs of one experiment, one after another, each its
own pytest process as a sweep point runs (harness/sweep/point.py), and the noise profile their
spread makes (harness/gates/profile.py) for gate.baseline: the driver (driver.py) and the
calibration's record and summary (record.py, the one record writer's kind "calibration").

A driver over the run package; its point is the sweep's (one whole run as its own pytest).
"""
