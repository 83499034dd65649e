"""Each torch release's reader on keys it does not know, by minor release (generated).

Written by `app.releases.generate` from the rules it dumps in each release (`make
releases-rules`); `tests/releases/test_rules.py` fails when this table and the rules disagree.
"fatal": its `_dict_to_dataclass` builds each dataclass with `cls(**data)`, so any key it does
not declare is a TypeError; "skip": it reads past such keys, losing their values.
"""

from __future__ import annotations

from typing import Literal

READERS: dict[str, Literal["fatal", "skip"]] = {
    "2.6": "fatal",
    "2.7": "fatal",
    "2.8": "fatal",
    "2.9": "skip",
    "2.10": "skip",
    "2.11": "skip",
    "2.12": "skip",
    "2.13": "skip",
    "2.14": "skip",
    "2.15": "skip",
}
