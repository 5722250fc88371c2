"""`specgate bisect`: the first value of an ordered list that regressed, found by A/B at each
midpoint against the good end (plan.py, driver.py; record.py its record, kind bisect; report.py
its page; docs/bisect.md)."""
