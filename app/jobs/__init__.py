"""The jobs that cross into a worker: plain bytes, paths and dicts in and out, importable by the
service without what the worker loads.

`torch`: the torch worker's jobs (deserialize, check at level torch, splice an answer), which
reach app.bridge only inside the worker; `output`: the .pt2 file such a job writes, and the
runs of an upload an answer is spliced from. Out of app.bridge because the service imports
them without torch: the pool names the jobs by module, and the HTTP layer sends the runs.
"""
