"""A program's tensors without torch: their views over raw or mapped storage, the safetensors
format, and where a torch worker finds them.

Out of app.bridge because nothing here needs torch, and the service and the document workers
use it as much as torch's modules do: the service names an upload's tensors (sources) and
writes safetensors, the bridge builds torch's tensors from these views. It sits below the
bridge (the bridge imports it, never the reverse), beside app.archive, whose raw tensors it
reads.
"""
