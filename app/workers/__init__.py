"""Worker processes for the service's work: one pool design for torch jobs and document jobs,
and the admission control that bounds the work in flight. Imports no torch."""
