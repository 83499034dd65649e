"""The one home of every recipe that crosses into a worker: typed job functions with plain paths,
bytes and small values in and out, importable by the service without what the worker loads.

`documents`: the torch-free document jobs (canonicalize, check, serialize, inspect, diff, compat,
a stored version's views) and the two recipes that hand a checked program on to torch
(`validate`, `deserialize_to`); `push`: a registry push's vetting (`prepare`); `graph`: the
graph answer; `torch`: the torch worker's jobs (deserialize, check at level torch, splice an
answer), which reach app.bridge only inside the worker; `output`: the .pt2 file such a job writes,
and the runs of an upload an answer is spliced from; `runners`: what runs a job (a document
worker or this process, a torch worker) as its callers hand it in. A job is submitted as the
function itself (pickled by reference: the worker imports its module), so mypy checks the call.
"""
