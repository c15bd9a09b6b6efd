"""What arming the killer starts from, read in one task (plugins/modules/idle_killer_held.py): as slurp read it."""

from __future__ import annotations

import base64
from pathlib import Path

from tests.module_file import load

held = load("idle_killer_held", Path(__file__).resolve().parents[2] / "plugins" / "modules" / "idle_killer_held.py")


def test_a_file_comes_back_in_base64_as_slurp_returned_it(tmp_path):
    words = tmp_path / "last-words.json"
    words.write_bytes(b'{"server_id": "s1", "reason": "idle 30 min"}\n')
    assert base64.b64decode(held.content(str(words))) == words.read_bytes()


def test_a_missing_or_unreadable_file_is_none(tmp_path):
    assert held.content(str(tmp_path / "absent")) is None
    assert held.content(str(tmp_path)) is None  # a folder: unreadable as a file
