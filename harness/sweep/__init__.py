"""`specgate sweep`: one whole run per point of a Hydra sweep (driver.py; the sweep ready to
run, plan.py), each point's pytest (point.py), run by a launcher (launchers.py: basic here,
or submitit through launch.py, app.py, jobs.py); the sweep's end (finish.py); the sweep's
record (record.py), gates (gates.py) and report (report.py).

A driver over the run package.
"""
