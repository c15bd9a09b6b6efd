"""What several unit files share: a clouds.yaml whose Keystone never answers, in a shell without cloud settings."""

from __future__ import annotations

import os
from collections.abc import Callable
from pathlib import Path

import pytest

# port 9 (discard) on loopback: nothing answers, so no test can reach a cloud by accident
DEAD_AUTH_URL = "http://127.0.0.1:9/v3"


@pytest.fixture
def clouds_yaml(tmp_path: Path, monkeypatch) -> Callable[..., Path]:
    """Write tmp_path/clouds.yaml with one entry per `name=password`, after clearing OS_* and GPU_RENT_*."""
    for var in [v for v in os.environ if v.startswith(("OS_", "GPU_RENT_"))]:
        monkeypatch.delenv(var)

    def write(**passwords: str) -> Path:
        entries = "".join(
            f"  {name}:\n    auth:\n      auth_url: {DEAD_AUTH_URL}\n      username: u\n"
            f"      password: {password}\n      project_name: p\n      user_domain_name: Default\n"
            f"      project_domain_name: Default\n    region_name: RegionOne\n"
            for name, password in passwords.items()
        )
        path = tmp_path / "clouds.yaml"
        path.write_text("clouds:\n" + entries)
        return path

    return write
