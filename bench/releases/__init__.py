"""`make releases`: every torch release's real `torch.export.load` against pt2serde's verdicts."""
