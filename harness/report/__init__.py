"""What people read: the summary table and verdicts in words (summary.py), `specgate report` as one HTML page (html.py, templates/), `specgate compare` (compare.py).
"""
