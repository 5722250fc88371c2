"""`specgate capacity`: the largest load an arm serves within its SLOs. The search arithmetic (search.py), the SLOs (slo.py), the driver that probes one server per arm (driver.py), and the capacity record, gate and report.

A driver over the run package.
"""
