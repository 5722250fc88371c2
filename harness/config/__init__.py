"""The config: Hydra composition (compose.py, the only module that calls Hydra's compose API) and the typed schema of every config group (schema.py).

May import: engines, load, servers, telemetry, gates (to validate each group's options against the registries that own them).
"""
