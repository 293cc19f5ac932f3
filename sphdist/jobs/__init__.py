"""The jobs sphdist runs on stored data, and the connection to a Dask cluster.

fit, transform, evaluate, export, neighbors, info and plots: what the CLI and batch jobs call.
"""
