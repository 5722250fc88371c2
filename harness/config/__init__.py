"""The config: Hydra composition (compose.py, the only module that calls Hydra's compose API) and the typed schema of every config group (schema.py); numbers.py checks the bounds the schema gives (harness/bounds.py), and secrets are a type of their own (harness/secrets.py).

It sits above the engines (each engine's options block, readable flags and old keys) and the load (its limits). What a config's names refer to (gates, engines, backends, datasets ...) is checked above the registries that own them, in harness/run/compose.py.
"""
