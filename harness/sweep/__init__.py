"""`specgate sweep`: one whole run per point of a Hydra sweep (driver.py), run here or by a launcher (launch.py, app.py, jobs.py); the sweep's record (record.py), gates (gates.py) and report (report.py).

A driver over the run package. May import: config, run, record, report, gates, measure, servers.
"""
