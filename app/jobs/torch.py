"""The torch jobs the service submits to the worker pool: plain bytes, paths and dicts in and out.

Importable without torch (the server names these functions); torch is imported in the worker.
Tensors are named by a `TensorSource` and mapped or read here, in the worker, never in the
service. Validation at level torch and deserialization are one job (`_torch_job`): the same
checks and the same build by torch's deserializer, so a program one accepts the other rebuilds;
what needs nothing torch makes (the CRC check, or the output file) runs beside the build.
"""

from __future__ import annotations

import os
import threading
from collections.abc import Callable
from functools import partial
from pathlib import Path
from typing import TYPE_CHECKING, Any

import schema
from app.archive.errors import ArchiveFailure
from app.failure import BridgeFailure
from app.jobs.output import Segment, Splicer, durable
from app.tensors.sources import Opened, TensorSource

if TYPE_CHECKING:
    from app.bridge.checks import Built


def job_ping() -> int:
    """The worker's pid: proves a worker is up and answering."""
    return os.getpid()


def job_torch_version() -> str:
    """The torch version the worker runs (`2.15.0+cu132`)."""
    from app.bridge.checks import torch_version

    return torch_version()


def job_deserialize_to_pt2(
    doc_json: bytes | Path,
    tensors: TensorSource,
    target: Path,
    for_torch: str | None = None,
) -> None:
    """Write to `target` the .pt2 of the program torch builds from a document (its bytes, or a
    file of them) and its tensors, made durable; fails with what `job_torch_check` reports when
    torch cannot build it. With `for_torch`, the archive is the one that older torch release
    loads (`app.programs.for_release`)."""
    samples = tensors.sample_input_bytes()
    _torch_job(doc_json, tensors, (target, partial(_writer, target, samples, for_torch)))


def job_splice_pt2(
    doc_json: bytes | Path,
    tensors: TensorSource,
    head: Path,
    for_torch: str | None = None,
) -> list[Segment]:
    """`job_deserialize_to_pt2` for an answer that is sent, then removed: the .pt2 as segments
    (app.jobs.output.Splicer), the archive's stored tensors left where they are and only what
    the writer makes written to `head` (not made durable: nobody reads it back)."""
    segments: list[Segment] = []
    samples = tensors.sample_input_bytes()
    splicer = partial(_splicer, head, tensors.archive, samples, for_torch, segments)
    _torch_job(doc_json, tensors, (head, splicer))
    return segments


def job_torch_check(doc_json: bytes | Path, tensors: TensorSource) -> dict[str, Any]:
    """`torch_check` of a document (its bytes, or a file of them) and its tensors, as
    `TorchCheck.to_dict()` data, with the torch release that checked (its build tag left out:
    `2.13.0`, not `2.13.0+cpu`)."""
    from app.bridge.checks import torch_version

    return {**_torch_job(doc_json, tensors, None), "torch": torch_version().split("+")[0]}


#: What writes a job's output from the document and the opened tensors (beside torch's build).
_Writer = Callable[[schema.ExportedProgram, Opened], None]


def _torch_job(
    doc_json: bytes | Path, tensors: TensorSource, output: tuple[Path, _Writer] | None
) -> dict[str, Any]:
    from app.bridge.checks import check_and_build

    doc = _document(doc_json)
    target = output[0] if output is not None else None
    try:
        with tensors.opened() as opened:
            # the output (or the CRC check) needs nothing torch makes: done while torch builds
            side = _Side(partial(output[1], doc, opened) if output is not None else opened.verify)
            try:
                built = check_and_build(doc, opened.tensors)
            finally:
                side.join()
        side.result()
        return _verdict(built, target)
    except BaseException:
        if target is not None:
            target.unlink(missing_ok=True)  # written while torch built: never half a result
        raise


def _verdict(built: Built, target: Path | None) -> dict[str, Any]:
    """The check's data; for a build asked for, its refusal when torch could not build it."""
    if target is not None and built.program is None:
        failure = built.failure
        if failure is not None and failure.code != "torch-deserialize-failed":
            raise failure  # our own refusal of the input (weights, screen), with its code
        raise _refusal(built.check.issues)
    return built.check.to_dict()


def _writer(
    target: Path,
    sample_inputs: bytes | None,
    for_torch: str | None,
    doc: schema.ExportedProgram,
    opened: Opened,
) -> None:
    """Write the output into its target, the caller's own temporary file, made durable as it
    is written (see app.jobs.output)."""
    from app.bridge.exported import write_built

    with durable(target) as out:
        write_built(doc, opened.streamed(), out, sample_inputs, for_torch)


def _splicer(
    head: Path,
    archive: Path | bytes | None,
    sample_inputs: bytes | None,
    for_torch: str | None,
    segments: list[Segment],
    doc: schema.ExportedProgram,
    opened: Opened,
) -> None:
    """Write the output as segments: the head into `head`, the spliced ranges into `segments`."""
    from app.bridge.exported import write_built

    with durable(head, keep=False) as out:
        splicer = Splicer(out, archive if isinstance(archive, Path) else None)
        try:
            write_built(doc, opened.streamed(splicer.streamed), splicer, sample_inputs, for_torch)
        except ArchiveFailure as failure:
            raise splicer.refusal(failure) from None
    segments.extend(splicer.segments)


class _Side:
    """Work on a helper thread beside torch's build (I/O and CRCs, which release the GIL)."""

    def __init__(self, work: Callable[[], None]) -> None:
        self._error: BaseException | None = None
        self._work = work
        self._thread = threading.Thread(target=self._run, name="pt2serde-torch-side")
        self._thread.start()

    def _run(self) -> None:
        try:
            self._work()
        except BaseException as exc:
            self._error = exc

    def join(self) -> None:
        """Wait for the work to end."""
        self._thread.join()

    def result(self) -> None:
        """Raise what the work raised, if anything."""
        if self._error is not None:
            raise self._error


def _refusal(issues: list[schema.Issue]) -> BridgeFailure:
    """Why torch cannot build the program: every issue, the first one's message in the lead."""
    first = issues[0]
    more = f" (and {len(issues) - 1} more issue(s))" if len(issues) > 1 else ""
    return BridgeFailure("torch-deserialize-failed", f"{first.message}{more}", issues)


def _document(doc_json: bytes | Path) -> schema.ExportedProgram:
    try:
        return schema.load(doc_json if isinstance(doc_json, bytes) else doc_json.read_bytes())
    except schema.DocumentInvalid as exc:
        raise BridgeFailure("document-invalid", str(exc), exc.issues) from None
