"""What the bootstrap role reads in one task (plugins/modules/bootstrap_probe.py): as its three tasks read it."""

from __future__ import annotations

from pathlib import Path

from tests.module_file import load

probe = load("bootstrap_probe", Path(__file__).resolve().parents[2] / "plugins" / "modules" / "bootstrap_probe.py")


def fake_smi(folder: Path, script: str) -> None:
    smi = folder / "nvidia-smi"
    smi.write_text(f"#!/bin/sh\n{script}\n")
    smi.chmod(0o755)


def test_no_nvidia_smi_answers_127_as_the_shells_command_not_found(monkeypatch, tmp_path):
    monkeypatch.setenv("PATH", str(tmp_path))
    assert probe.nvidia_smi() == {"rc": 127, "stdout_lines": [], "stderr_lines": []}


def test_nvidia_smis_rows_and_its_failure_come_back_as_lines(monkeypatch, tmp_path):
    monkeypatch.setenv("PATH", f"{tmp_path}:/usr/bin:/bin")
    fake_smi(tmp_path, 'echo "550.54.15, NVIDIA L4"; echo "550.54.15, NVIDIA L4"')
    assert probe.nvidia_smi() == {"rc": 0, "stdout_lines": ["550.54.15, NVIDIA L4"] * 2, "stderr_lines": []}
    fake_smi(tmp_path, "echo 'NVIDIA-SMI has failed because it could not communicate' >&2; exit 9")
    said = probe.nvidia_smi()
    assert said["rc"] == 9 and said["stderr_lines"][0].startswith("NVIDIA-SMI has failed")


def test_the_kernel_drivers_text_or_none_without_the_driver(tmp_path):
    version = tmp_path / "version"
    version.write_text("NVRM version: NVIDIA UNIX x86_64 Kernel Module  550.54.15  Tue Mar  5 22:23:56 UTC 2024\n")
    assert "Kernel Module  550.54.15" in probe.kernel_driver(str(version))
    assert probe.kernel_driver(str(tmp_path / "absent")) is None


def test_df_of_this_machine_answers_with_its_header_and_a_line_per_path():
    said = probe.run(["df", "--output=avail,target", "-B1", "--", "/", "/"])
    assert said["rc"] == 0 and said["stdout_lines"][0].split() == ["Avail", "Mounted", "on"]
    assert len(said["stdout_lines"]) == 3 and said["stdout_lines"][1].split()[1] == "/"
    assert probe.run(["df", "--", "/no/such/path"])["rc"] != 0
