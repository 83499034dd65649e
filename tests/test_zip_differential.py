"""Archives that read one way to us and another to torch's zip reader: each is refused, and
torch's own load of it does what the corpus says (run the payload we never saw)."""

from __future__ import annotations

import io
import zipfile
from pathlib import Path

from tests.hostile import HOSTILE, SAMPLE_INPUTS, consume, evil_pickle
from tests.zoo import ZooProgram, archive_bytes


def test_torch_reads_the_hidden_directory_and_runs_its_pickle(
    zoo: dict[str, ZooProgram], tmp_path: Path
) -> None:
    [hidden] = [h for h in HOSTILE if h.name == "hidden-directory"]
    marker = tmp_path / "marker"
    program = zoo["conv"]
    data = hidden.build({"conv": archive_bytes(program.ep)}, marker)
    with zipfile.ZipFile(io.BytesIO(data)) as zf:
        assert zf.read(SAMPLE_INPUTS) == evil_pickle(marker)  # Python's reader sees it too
    consumed = consume(data, program.args, program.kwargs, tmp_path / "torch")
    assert ["os.system"] == [event for event, _ in consumed.events if event == "os.system"]
    assert marker.exists()
