"""Starting the audited service (tests.fuzz.audited_server) on a free port.

torch workers are forkserver children that do not inherit the server's audit hook, so
tests.fuzz.audit_hook is added to PT2SERDE_WORKER_IMPORTS: every worker installs it too.
"""

from __future__ import annotations

from pathlib import Path

from tests.api.conftest import Server, start_server
from tests.fuzz.audit_hook import AUDIT_DIR_ENV

_SERVER_MODULE = "tests.fuzz.audited_server"
_HOOK_MODULE = "tests.fuzz.audit_hook"


def start_audited_server(env: dict[str, str], events: Path) -> Server:
    """Start the audited service, recording into `events`; return once /healthz answers."""
    imports = [m for m in env.get("PT2SERDE_WORKER_IMPORTS", "").split(",") if m]
    audited = {
        **env,
        "PT2SERDE_WORKER_IMPORTS": ",".join([*imports, _HOOK_MODULE]),
        AUDIT_DIR_ENV: str(events),
    }
    return start_server(audited, (_SERVER_MODULE,))
