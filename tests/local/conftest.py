"""A real OpenSSH sshd on loopback, shared by the laptop-side tests of this folder."""

import os

import pytest

from tests.loopback_sshd import Sshd, missing


@pytest.fixture(scope="module")
def sshd(tmp_path_factory):
    reason = missing()
    if reason:
        if os.environ.get("CI"):  # CI installs openssh-server and runs as root: a missing one is a failure
            pytest.fail(reason)
        pytest.skip(reason)
    with Sshd(tmp_path_factory.mktemp("sshd")) as server:
        yield server
