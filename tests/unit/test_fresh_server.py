"""Which floating IP a failed build gives back (plugins/modules/fresh_server.py): never a kept or attached one."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.module_file import load

module = load("fresh_server", Path(__file__).resolve().parents[2] / "plugins" / "modules" / "fresh_server.py")


@pytest.mark.parametrize(
    ("made", "keep", "attached", "released"),
    [
        (True, False, False, True),  # made for this server: it bills for nothing now
        (True, True, False, True),  # made here even with KEEP_FLOATING_IP: the project had none to keep
        (False, False, False, True),  # a free one an interrupted up left: stop would release it anyway
        (False, True, False, False),  # KEEP_FLOATING_IP: the address the user keeps stays
        (False, False, True, False),  # on a port: in use, not this build's to give back
    ],
)
def test_a_failed_build_gives_back_only_an_address_nobody_keeps(made, keep, attached, released):
    assert module.released(made, keep, attached) is released
