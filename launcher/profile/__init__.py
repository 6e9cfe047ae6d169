"""TOML cluster profile -> validated ``Profile``: reader, keys, schema, overrides, host ranges, Slurm env.

Runs on the user's machine.
"""
