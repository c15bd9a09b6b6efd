"""The laptop's one login (cloud/connect.py): up, status, doctor and setup all log in through `login`."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

from gpu_rent.cloud.connect import CloudUnreachable, login
from gpu_rent.project.env import CloudAuth

PACKAGE = Path(__file__).resolve().parents[2] / "gpu_rent"


def test_a_refused_login_is_one_line_without_the_password_or_the_urls_secret():
    options = {"auth_url": "http://u:URLSECRET@127.0.0.1:9/v3", "username": "u", "password": "pw9", "project_name": "p"}
    with pytest.raises(CloudUnreachable) as caught:
        login(CloudAuth(options=tuple(sorted(options.items()))), secrets=["pw9"])  # nothing answers on port 9
    line = str(caught.value)
    assert line.startswith("cannot reach the cloud (") and "\n" not in line
    assert "URLSECRET" not in line + caught.value.said and "http://***@127.0.0.1:9/v3" in caught.value.said
    assert caught.value.kind and line.endswith(caught.value.said[:300])


def test_a_secret_the_error_quotes_is_blanked():
    class Quoting(CloudAuth):
        def connect(self):
            raise RuntimeError("refused: password=hunter2 for user u")

    with pytest.raises(CloudUnreachable) as caught:
        login(Quoting(options=(("auth_url", "http://127.0.0.1:9/v3"),)), secrets=["hunter2"])
    assert "hunter2" not in str(caught.value) and caught.value.said == "refused: password=*** for user u"
    assert caught.value.kind == "RuntimeError"


def test_only_the_one_login_authorizes():
    """A second login would bring back its own error handling and masking (there were three)."""
    callers = []
    for path in PACKAGE.rglob("*.py"):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Attribute) and node.attr == "authorize":
                callers.append(str(path.relative_to(PACKAGE)))
    assert callers == ["cloud/connect.py"]
