"""Records on disk: the one writer every driver uses (recorder.py's Recorder, by kind: run, sweep,
capacity, calibration; kinds.py names each kind's folder and JSON), the folder and the one reader (store.py:
paths, a record's kind, results.json, histories), the per-request columns (requests.py: Parquet,
streamed by row group), atomic files (atomic.py) and the one redaction
policy (secrets.py) every byte that leaves the process goes through.

Telemetry writes its own CSV and plot into an arm's folder (Recorder.write_arm_files).
"""
