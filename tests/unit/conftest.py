"""What several unit files share: a clouds.yaml whose Keystone never answers (and a project on it), in a shell
without cloud settings."""

from __future__ import annotations

import os
import subprocess
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


@pytest.fixture
def dead_cloud_project(tmp_path: Path, clouds_yaml) -> Path:
    """A project folder on a cloud that never answers, with its SSH key and nothing rented."""
    clouds = clouds_yaml(test="s3cret-password")
    subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", str(tmp_path / "key")], check=True)
    (tmp_path / ".env").write_text(
        f"OS_CLOUD=test\nOS_CLIENT_CONFIG_FILE={clouds}\nGPU_RENT_SSH_KEY={tmp_path / 'key'}\n"
    )
    (tmp_path / "gpu-rent.vars").write_text(
        "POOL=ru-7a\nFLAVOR=gpu.a100.1\nIMAGE=Ubuntu 24.04 GPU\nOPERATOR_CIDR=10.231.7.1/32\n"
    )
    return tmp_path
