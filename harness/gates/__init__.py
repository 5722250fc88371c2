"""Verdicts: the gate registry (registry.py), the comparison of a metric between runs with an interval (change.py), the lossless comparison, whether a reference run is a fair comparison (baseline_match.py), and whether a figure is the client's own lag (client_bound.py).

May import: config (schema types), measure, record (to read a reference run).
"""
