"""torch's only door: every module here imports torch, and nothing outside imports torch.

ExportedProgram <-> document (exported, torch_schema), torch-level checks (checks), stand-in
pytree types (standins), and the dump scripts of a release's rules (release_dump, opset_dump,
weights_only_dump). What the torch side needs without torch lives below it: the tensors torch
is handed (app.tensors), what torch's check reports (app.programs.torch_check), the bridge's
failure (app.failure.BridgeFailure); what starts torch's work lives above it, in the torch
worker's jobs (app.jobs.torch), which import this package only inside the worker.
"""
