"""Figures from request records: the metric registry (registry.py), an arm's result (metrics.py), the server's own counters over the measured window (server_metrics.py), client against server (agreement.py), prompt lengths.
"""
