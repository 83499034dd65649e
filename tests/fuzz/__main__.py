"""`python -m tests.fuzz --mutants N --seed S [--minutes M]`: a campaign against a fresh server.

The server runs with the API tests' settings (tests.api.conftest.SERVER_ENV). Progress goes to
stdout every few seconds, then a summary; the exit status is 1 if any defect or marker file was
found. `--save DIR` writes each defective mutant's payload and request there; `--only I J`
replays single mutants of a campaign (give the same `--focus`, if any).
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from pathlib import Path

from tests.api.conftest import SERVER_ENV, start_server, stop_server, upload_leftovers
from tests.fuzz.campaign import Defect, run_campaign
from tests.fuzz.mutants import ENDPOINTS, Mutant, build_corpus
from tests.zoo import cached_zoo


def _say(line: str) -> None:
    sys.stdout.write(line + "\n")
    sys.stdout.flush()


def main(argv: list[str] | None = None) -> int:
    """Run one campaign; 0 when nothing was found."""
    parser = argparse.ArgumentParser(prog="python -m tests.fuzz", description=__doc__)
    parser.add_argument("--mutants", type=int, default=2000, help="how many mutants to send")
    parser.add_argument("--seed", type=int, default=0, help="the campaign's seed")
    parser.add_argument("--minutes", type=float, help="stop after this long, sent or not")
    parser.add_argument("--threads", type=int, default=3, help="concurrent client threads")
    parser.add_argument("--only", type=int, nargs="+", help="replay these mutant indices only")
    parser.add_argument("--save", type=Path, help="write defective mutants here")
    parser.add_argument(
        "--focus", nargs="+", choices=ENDPOINTS, default=[], help="send to these endpoints only"
    )
    args = parser.parse_args(argv)

    started = time.monotonic()
    corpus = build_corpus(cached_zoo())
    server = start_server(SERVER_ENV)
    _say(
        f"corpus of {len(corpus.names)} programs and server {server.url} ready in "
        f"{time.monotonic() - started:.0f} s; pid {server.process.pid}, log {server.tmp}"
    )

    def keep(mutant: Mutant, defect: Defect) -> None:
        if args.save is None:
            return
        args.save.mkdir(parents=True, exist_ok=True)
        (args.save / f"mutant-{mutant.index}.bin").write_bytes(mutant.payload)
        (args.save / f"mutant-{mutant.index}.txt").write_text(defect.render() + "\n")
        for name, part in mutant.request.files:
            (args.save / f"mutant-{mutant.index}.{name}.bin").write_bytes(part[1])

    try:
        with tempfile.TemporaryDirectory(prefix="pt2serde-fuzz-markers-") as markers:
            summary = run_campaign(
                server.url,
                corpus,
                seed=args.seed,
                mutants=args.mutants,
                marker_dir=Path(markers),
                minutes=args.minutes,
                threads=args.threads,
                only=args.only,
                focus=tuple(args.focus),
                progress=_say,
                keep=keep,
            )
        alive = server.process.poll() is None
        leftovers = upload_leftovers(server)
    finally:
        stop_server(server)
    _say(summary.render())
    _say(f"server alive at the end: {alive}; upload folders left behind: {len(leftovers)}")
    return 0 if summary.ok and alive and not leftovers else 1


if __name__ == "__main__":
    sys.exit(main())
