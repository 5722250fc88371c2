"""The run record on disk: paths, atomic writes and the one reader (store.py), the per-request columns it writes and reads (requests.py: Parquet, streamed by row group), the writer of one run (recorder.py), atomic files (atomic.py) and the one redaction policy (secrets.py) every byte that leaves the process goes through.

May import: config (the schema's types), telemetry (its CSV and plots).
"""
