"""What the swarmui role reads in one task (plugins/modules/swarmui_probe.py): files as they are, absent as null."""

from __future__ import annotations

import os
from pathlib import Path

from tests.module_file import load

probe = load("swarmui_probe", Path(__file__).resolve().parents[2] / "plugins" / "modules" / "swarmui_probe.py")


def test_files_read_whole_and_absent_ones_as_none(tmp_path):
    settings = tmp_path / "Settings.fds"
    settings.write_text("IsInstalled: true\nLaunchMode: none")  # no newline at the end: kept as it is
    assert probe.text(str(settings)) == "IsInstalled: true\nLaunchMode: none"
    assert probe.text(str(tmp_path / "Backends.fds")) is None


def test_the_data_folder_mode_is_four_octal_digits_and_none_for_no_folder(tmp_path):
    data = tmp_path / "Data"
    data.mkdir(mode=0o700)
    os.chmod(data, 0o700)  # the umask does not decide
    assert probe.folder_mode(str(data)) == "0700"
    assert probe.folder_mode(str(tmp_path / "absent")) is None
    (tmp_path / "file").write_text("")
    assert probe.folder_mode(str(tmp_path / "file")) is None  # a file where the folder belongs: file creates it


def test_no_nvidia_smi_answers_127_as_the_roles_command_did(monkeypatch):
    monkeypatch.setenv("PATH", "/nonexistent")
    assert probe.gpus() == {"rc": 127, "stdout_lines": []}


def test_nvidia_smi_rows_are_returned_as_lines(tmp_path, monkeypatch):
    fake = tmp_path / "nvidia-smi"
    fake.write_text('#!/bin/sh\necho "$*" > "$(dirname "$0")/args"\nprintf \'0, 24576\\n1, 81920\\n\'\n')
    fake.chmod(0o755)
    monkeypatch.setenv("PATH", f"{tmp_path}:/usr/bin:/bin")  # ours first
    assert probe.gpus()["stdout_lines"] == ["0, 24576", "1, 81920"]
    asked = ["--query-gpu=index,memory.total", "--format=csv,noheader,nounits"]
    assert (tmp_path / "args").read_text().split() == asked


def test_lines_split_as_lineinfile_splits_at_newlines_only():
    assert probe.lines("IsInstalled: true\r\nA: 1\x0cB\nLaunchMode: none") == [
        "IsInstalled: true\r\n",  # its \r kept: lineinfile would rewrite this line, and so it runs
        "A: 1\x0cB\n",  # one line for lineinfile, two for str.splitlines
        "LaunchMode: none",  # no newline at the end: lineinfile adds one, and so it runs
    ]
    assert probe.lines(None) == [] and probe.lines("") == []


def test_an_unreadable_file_reads_as_absent(tmp_path):
    (tmp_path / "Settings.fds").mkdir()  # a folder where the file belongs
    assert probe.text(str(tmp_path / "Settings.fds")) is None
