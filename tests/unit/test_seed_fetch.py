"""The seed role's download script (gpu_rent/on_vm/fetch.py): its pure parts, then real HTTP on loopback."""

from __future__ import annotations

import hashlib
import json
import os
import time
from pathlib import Path

import pytest

from gpu_rent.on_vm import fetch
from gpu_rent.on_vm.progress_line import ProgressLine
from tests.ground.test_seed import FileServer


def sha(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


# ------------------------------------------------------------------ progress protocol (SPEC §11)


def test_a_progress_line_carries_done_total_and_stage_in_one_line():
    line = fetch.progress_line(2472, 3862, "models: x.safetensors")
    assert line == '::gpu-rent-progress {"done":2472,"total":3862,"stage":"models: x.safetensors"}'
    assert fetch.parse_progress(line) == ProgressLine(2472, 3862, "models: x.safetensors")


def test_a_progress_line_without_a_total_omits_it():
    assert fetch.parse_progress(fetch.progress_line(5, None, "models: y")) == ProgressLine(5, None, "models: y")


def test_a_stage_never_exceeds_64_characters():
    stage = fetch.stage_text("models", "a-very-long-model-name-" * 5 + ".safetensors")
    assert len(stage) == 64 and stage.startswith("models: a-very-long")
    assert len(json.loads(fetch.progress_line(1, 2, "x" * 100).split(" ", 1)[1])["stage"]) == 64


@pytest.mark.parametrize(
    "line",
    ["", "downloaded /x", "::gpu-rent-progress", "::gpu-rent-progress {", '::gpu-rent-progress {"total":3}',
     '::gpu-rent-progress ["done"]', '::gpu-rent-progress {"done":"3"}'],
)  # fmt: skip
def test_anything_else_is_not_a_progress_line(line):
    assert fetch.parse_progress(line) is None


# ------------------------------------------------------------------ names and messages


def test_names_come_from_the_url_the_server_or_the_entry_and_never_leave_the_folder():
    assert fetch.name_from_url("https://h/a/b/my%20model.safetensors?x=1") == "my model.safetensors"
    assert fetch.name_from_url("https://h/") is None
    assert fetch.name_from_disposition('attachment; filename="m.safetensors"') == "m.safetensors"
    assert fetch.name_from_disposition("attachment; filename*=UTF-8''caf%C3%A9.gguf") == "café.gguf"
    assert fetch.safe_name("../../etc/passwd") == "passwd"
    assert fetch.safe_name("..") is None
    assert fetch.safe_name("x.part") is None


def test_urls_in_messages_lose_their_query_and_credentials():
    shown = fetch.shown_url("https://user:pw@cdn.example:8443/f/m.bin?X-Amz-Signature=s&token=t")
    assert shown == "https://cdn.example:8443/f/m.bin"


# ------------------------------------------------------------------ sidecar


def test_the_sidecar_is_trusted_only_while_size_and_mtime_match(tmp_path):
    model = tmp_path / "m.safetensors"
    model.write_bytes(b"weights")
    fetch.write_sidecar(model, sha(b"weights"))
    assert fetch.trusted_sha256(model) == sha(b"weights")
    assert fetch.find_present(tmp_path, "m.safetensors", sha(b"weights")) == model
    assert fetch.find_present(tmp_path, None, sha(b"weights")) == model  # a Civitai entry without a name
    assert fetch.find_present(tmp_path, "m.safetensors", "0" * 64) is None

    st = model.stat()
    os.utime(model, ns=(st.st_atime_ns, st.st_mtime_ns + 1_000_000_000))
    assert fetch.trusted_sha256(model) is None
    fetch.write_sidecar(model, sha(b"weights"))
    model.write_bytes(b"weightz")  # same size, new mtime
    assert fetch.trusted_sha256(model) is None
    (tmp_path / "m.safetensors.gpu-rent-sha256").write_text("not json")
    assert fetch.trusted_sha256(model) is None


def test_without_a_checksum_a_present_file_is_kept(tmp_path):
    (tmp_path / "tags.csv").write_text("a\n")
    assert fetch.find_present(tmp_path, "tags.csv", None) == tmp_path / "tags.csv"
    assert fetch.find_present(tmp_path, "other.csv", None) is None


def test_an_async_job_is_over_when_its_results_no_longer_say_started(tmp_path):
    job = tmp_path / "job"
    assert fetch.job_finished(job)  # gone: nothing to wait for
    job.write_text(json.dumps({"started": True, "finished": False, "ansible_job_id": "1"}))
    assert not fetch.job_finished(job)
    job.write_text(json.dumps({"rc": 1, "stdout": "", "stderr": "sha256 mismatch ..."}))
    assert fetch.job_finished(job)


def test_the_lock_holds_the_time_it_counts_until(tmp_path):
    lock = tmp_path / "run" / "seeding"
    fetch.main(["lock", "--file", str(lock), "--minutes", "120"])
    assert abs(int(lock.read_text()) - (time.time() + 7200)) < 5


def test_status_prints_the_latest_line_of_this_job_or_a_start(tmp_path, capsys):
    progress, job = tmp_path / "progress", tmp_path / "job"
    job.write_text(json.dumps({"started": True, "finished": False}))
    args = ["status", "--progress-file", str(progress), "--job-file", str(job), "--stage", "models: m"]
    fetch.main(args)
    started = '::gpu-rent-progress {"done":0,"stage":"models: m"}'
    assert capsys.readouterr().out.splitlines() == [started, "job: running"]
    time.sleep(0.01)
    progress.write_text(fetch.progress_line(7, 9, "models: m") + "\n")
    fetch.main(args)
    assert capsys.readouterr().out.splitlines()[0] == fetch.progress_line(7, 9, "models: m")


# ------------------------------------------------------------------ the script against real HTTP on loopback


@pytest.fixture
def files():
    server = FileServer("127.0.0.1")
    yield server
    server.close()


def run(tmp_path: Path, *args: str, retries: int = 0) -> int:
    return fetch.main(["fetch", "--kind", "models", "--dir", str(tmp_path / "Models"),
                       "--progress-file", str(tmp_path / "progress"), "--retries", str(retries), *args])  # fmt: skip


def test_a_file_lands_verified_and_is_not_asked_for_again(files, tmp_path, capsys):
    data = os.urandom(300_000)
    url = files.add("/m/a.safetensors", data)
    assert run(tmp_path, "--url", url, "--sha256", sha(data)) == 0
    out = capsys.readouterr().out
    assert out.splitlines()[-1] == f"downloaded {tmp_path / 'Models' / 'a.safetensors'}"
    last = fetch.parse_progress(out.splitlines()[-2])
    assert last == ProgressLine(300_000, 300_000, "models: a.safetensors")
    assert (tmp_path / "Models" / "a.safetensors").read_bytes() == data
    assert fetch.parse_progress((tmp_path / "progress").read_text().strip()).done == 300_000

    assert run(tmp_path, "--url", url, "--sha256", sha(data)) == 0
    assert capsys.readouterr().out.startswith("present ")
    assert len(files.seen) == 1


def test_a_file_put_there_by_hand_is_hashed_once_and_kept(files, tmp_path, capsys):
    (tmp_path / "Models").mkdir()
    (tmp_path / "Models" / "b.bin").write_bytes(b"mine")
    assert run(tmp_path, "--url", files.base + "/m/b.bin", "--sha256", sha(b"mine")) == 0
    assert capsys.readouterr().out.splitlines()[-1].startswith("present ")
    assert files.seen == []
    assert fetch.trusted_sha256(tmp_path / "Models" / "b.bin") == sha(b"mine")


def test_a_users_file_of_the_same_name_is_never_overwritten(files, tmp_path, capsys):
    (tmp_path / "Models").mkdir()
    (tmp_path / "Models" / "d.bin").write_bytes(b"the user's own model")
    data = b"what seed.yml wants"
    assert run(tmp_path, "--url", files.add("/m/d.bin", data), "--sha256", sha(data)) == 1
    err = capsys.readouterr().err
    assert "exists with sha256" in err and "left as it is" in err and len(err.strip().splitlines()) == 1
    assert (tmp_path / "Models" / "d.bin").read_bytes() == b"the user's own model"
    assert files.seen == []  # refused before downloading anything


def test_a_wrong_checksum_removes_everything_and_says_so_in_one_line(files, tmp_path, capsys):
    data = b"x" * 1000
    assert run(tmp_path, "--url", files.add("/m/c.bin", data), "--sha256", "ab" * 32) == 1
    err = capsys.readouterr().err
    assert err == f"sha256 mismatch for c.bin: expected {'ab' * 32}, got {sha(data)}; removed\n"
    assert list((tmp_path / "Models").iterdir()) == []


def test_an_http_error_is_named(files, tmp_path, capsys):
    assert run(tmp_path, "--url", files.base + "/m/nope.bin?sig=secret", "--sha256", "ab" * 32) == 1
    err = capsys.readouterr().err
    assert err == f"download of nope.bin failed: HTTP 404 Not Found from {files.base}/m/nope.bin\n"


def test_a_dropped_connection_resumes_with_range_in_the_same_run(files, tmp_path):
    data = os.urandom(500_000)
    url = files.add("/m/d.bin", data)
    files.drop_after["/m/d.bin"] = 200_000
    assert run(tmp_path, "--url", url, "--sha256", sha(data), retries=1) == 0
    assert [s.range for s in files.seen] == [None, "bytes=200000-"]
    assert (tmp_path / "Models" / "d.bin").read_bytes() == data


def test_a_server_that_ignores_range_gets_a_fresh_start(files, tmp_path, capsys):
    data = os.urandom(100_000)
    url = files.add("/m/e.bin", data)
    (tmp_path / "Models").mkdir()
    (tmp_path / "Models" / "e.bin.part").write_bytes(b"garbage that must not be kept")
    files.ignore_range.add("/m/e.bin")
    assert run(tmp_path, "--url", url, "--sha256", sha(data)) == 0
    assert files.seen[0].range == "bytes=29-"
    assert (tmp_path / "Models" / "e.bin").read_bytes() == data


def test_a_complete_part_answered_with_416_is_verified_and_kept(files, tmp_path):
    data = os.urandom(10_000)
    url = files.add("/m/f.bin", data)
    (tmp_path / "Models").mkdir()
    (tmp_path / "Models" / "f.bin.part").write_bytes(data)
    assert run(tmp_path, "--url", url, "--sha256", sha(data)) == 0
    assert (tmp_path / "Models" / "f.bin").read_bytes() == data
    assert not (tmp_path / "Models" / "f.bin.part").exists()


def test_civitai_gets_the_token_the_cdn_does_not_and_the_name_comes_from_the_answer(files, tmp_path, capsys):
    data = os.urandom(50_000)
    files.add("/cdn/blob", data, disposition='attachment; filename="civ.safetensors"')
    files.civitai["42"] = ("/cdn/blob", "tok-123")
    token = tmp_path / "token"
    token.write_text("tok-123\n")
    args = ["--civitai", "42", "--url", files.base + "/civitai/42", "--sha256", sha(data), "--token-file", str(token)]
    assert run(tmp_path, *args) == 0
    assert (tmp_path / "Models" / "civ.safetensors").read_bytes() == data
    assert [(s.path, s.authorization) for s in files.seen] == [("/civitai/42", "Bearer tok-123"), ("/cdn/blob", None)]
    assert "tok-123" not in capsys.readouterr().out

    assert run(tmp_path, *args) == 0  # found by its checksum; Civitai is not asked for the name again
    assert len(files.seen) == 2


def test_civitai_without_a_token_says_what_to_set(files, tmp_path, capsys):
    files.civitai["43"] = ("/cdn/blob", "tok")
    assert run(tmp_path, "--civitai", "43", "--url", files.base + "/civitai/43", "--sha256", "ab" * 32) == 1
    err = capsys.readouterr().err
    assert "HTTP 401" in err and "CIVITAI_TOKEN" in err


def test_check_says_present_or_missing_without_downloading(files, tmp_path, capsys):
    data = b"weights"
    args = ["check", "--url", files.base + "/m/g.bin", "--sha256", sha(data), "--dir", str(tmp_path)]
    assert fetch.main(args) == 0
    assert capsys.readouterr().out == "missing g.bin\n"
    (tmp_path / "g.bin").write_bytes(data)
    fetch.write_sidecar(tmp_path / "g.bin", sha(data))
    assert fetch.main(args) == 0
    assert capsys.readouterr().out == f"present {tmp_path / 'g.bin'}\n"
    assert fetch.main(["check", "--civitai", "7", "--sha256", "ab" * 32, "--dir", str(tmp_path)]) == 0
    assert capsys.readouterr().out == "missing civitai model version 7\n"
    assert files.seen == []
