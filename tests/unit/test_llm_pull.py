"""The llm_runtime role's pull script (gpu_rent/on_vm/llm_pull.py): its pure parts, then pulls through the Ollama
stand-in from the registry stand-in, both real processes on loopback (as tests/unit/test_ollama_standin.py starts
them), the script run as the role runs it on the VM: `python3 -m on_vm.llm_pull` over the role's files/on_vm."""

from __future__ import annotations

import hashlib
import subprocess
import sys
import time
from pathlib import Path

import pytest

from gpu_rent.on_vm import llm_pull
from gpu_rent.on_vm.progress_line import parse as parse_progress
from gpu_rent.project import llm_models
from tests.unit.test_ollama_standin import MB, Ollama, Registry, part_file, registry, stop, wait_for
from tests.unit.test_ollama_standin import servers as servers  # a fixture: each server killed at the end

REPO = Path(__file__).resolve().parents[2]
# The role's command line (roles/llm_runtime/vars llm_runtime_pull) over the modules the role copies, and no
# more: a sibling the role forgot fails here. No byte code is left in the role's folder.
SCRIPT = ["/usr/bin/env", f"PYTHONPATH={REPO / 'roles' / 'llm_runtime' / 'files'}", "PYTHONDONTWRITEBYTECODE=1",
          sys.executable, "-m", "on_vm.llm_pull"]  # fmt: skip


# ------------------------------------------------------------------ pure parts


NAMES = {
    "llama3.2": ("registry.ollama.ai", "library", "llama3.2", "latest"),
    "llama3.2:1b": ("registry.ollama.ai", "library", "llama3.2", "1b"),
    "Library/Llama3.2:1B": ("registry.ollama.ai", "library", "llama3.2", "1b"),
    "me/model": ("registry.ollama.ai", "me", "model", "latest"),
    "10.231.7.1:5000/library/tiny:latest": ("10.231.7.1:5000", "library", "tiny", "latest"),
    "10.231.7.1:5000/library/tiny": ("10.231.7.1:5000", "library", "tiny", "latest"),
    "http://host:1/ns/m:t": ("host:1", "ns", "m", "t"),
    "qwen3:4b:local": ("registry.ollama.ai", "library", "qwen3", "4b"),
}


@pytest.mark.parametrize("name", NAMES)
def test_a_name_is_the_model_upstream_s_name_go_makes_of_it(name):
    assert llm_pull.model_key(name) == NAMES[name]


@pytest.mark.parametrize("name", [n for n in NAMES if not n.endswith(":local")])
def test_the_vm_reads_a_name_as_ollama_models_yaml_does(name):
    """The wrapper checks ollama-models.yaml with project.llm_models; the VM must take each name the same way."""
    parts = llm_models.ollama_name_parts(name)
    assert llm_pull.model_key(name) == tuple(parts[k].casefold() for k in ("host", "namespace", "model", "tag"))


def test_a_listed_model_is_found_by_any_spelling_of_its_name():
    tags = [{"name": "llama3.2:1b", "model": "llama3.2:1b", "digest": "A" * 64},
            {"name": "10.231.7.1:5000/library/tiny:latest", "digest": "b" * 64}]  # fmt: skip
    assert llm_pull.listed_digest(tags, "registry.ollama.ai/library/LLAMA3.2:1b") == "sha256:" + "a" * 64
    assert llm_pull.listed_digest(tags, "10.231.7.1:5000/library/tiny") == "sha256:" + "b" * 64
    assert llm_pull.listed_digest(tags, "llama3.2") is None  # another tag
    assert llm_pull.listed_digest(tags, "10.231.7.1:5001/library/tiny") is None  # another registry


def test_progress_sums_the_blobs_reported_so_far():
    layers = llm_pull.Layers()
    assert not layers.update({"status": "pulling manifest"})
    assert layers.update({"status": "pulling aaa", "digest": "sha256:a", "total": 100})  # no completed yet
    assert (layers.done, layers.total) == (0, 100)
    layers.update({"status": "pulling aaa", "digest": "sha256:a", "total": 100, "completed": 60})
    layers.update({"status": "pulling bbb", "digest": "sha256:b", "total": 5, "completed": 5})
    assert (layers.done, layers.total) == (65, 105)


def test_a_digest_is_taken_with_or_without_its_prefix_and_nothing_else_is():
    assert llm_pull.digest_of("AB" * 32) == "sha256:" + "ab" * 32
    assert llm_pull.digest_of("sha256:" + "ab" * 32) == "sha256:" + "ab" * 32
    assert llm_pull.digest_of("sha256:abc") is None and llm_pull.digest_of(None) is None


# ------------------------------------------------------------------ against the stand-ins


def pull_argv(ollama: Ollama, model: str, tmp: Path, *extra: str) -> list[str]:
    """The pull as the role starts it, its progress file in tmp."""
    return [*SCRIPT, "pull", "--model", model, "--insecure", "--url",
            f"http://127.0.0.1:{ollama.port}", "--progress-file", str(tmp / "progress"), *extra]  # fmt: skip


def run(ollama: Ollama, *args: str, tmp: Path) -> subprocess.CompletedProcess:
    argv = [*SCRIPT, *args, "--url", f"http://127.0.0.1:{ollama.port}"]
    if args[0] == "pull":
        argv += ["--progress-file", str(tmp / "progress"), "--lock-file", str(tmp / "seeding"), "--retries", "2"]
    return subprocess.run(argv, capture_output=True, text=True, timeout=120, env={"PATH": "/usr/bin:/bin"})


def progress_lines(stdout: str) -> list:
    return [p for p in map(parse_progress, stdout.splitlines()) if p is not None]


def test_a_missing_model_is_pulled_with_progress_and_a_present_one_is_left_alone(tmp_path, servers):
    written = registry.write_model(tmp_path / "registry", size=3 * MB)
    reg = servers(Registry, tmp_path / "registry", bytes_per_second=3 * MB)
    ollama = servers(Ollama, tmp_path / "ollama", models=tmp_path / "models")
    name, digest = reg.model(), "sha256:" + written["digest"]

    assert run(ollama, "check", "--model", name, tmp=tmp_path).stdout == f"missing {name}\n"
    pulled = run(ollama, "pull", "--model", name, "--digest", digest, "--insecure", tmp=tmp_path)
    assert pulled.returncode == 0, pulled.stderr
    assert pulled.stdout.splitlines()[-1] == f"pulled {name} {digest}"
    lines = progress_lines(pulled.stdout)
    assert len(lines) >= 3 and {p.stage for p in lines} == {f"llm: {name}"}
    assert [p.done for p in lines] == sorted(p.done for p in lines)
    assert lines[-1].done == lines[-1].total == written["size"]  # every blob: the model, its template, its config
    assert parse_progress((tmp_path / "progress").read_text()) == lines[-1]  # what the role's follow-up reads
    assert not (tmp_path / "seeding").exists()  # refreshed only while it exists: never made by a pull

    fetched = reg.blob_bytes()
    assert run(ollama, "check", "--model", name, "--digest", digest, tmp=tmp_path).stdout == f"present {name}\n"
    again = run(ollama, "pull", "--model", name.replace("tiny", "TINY"), "--digest", digest, "--insecure", tmp=tmp_path)
    assert (again.returncode, again.stdout) == (0, f"present {name.replace('tiny', 'TINY')}\n")
    assert reg.blob_bytes() == fetched  # nothing asked of the registry


def test_a_pin_the_registry_does_not_give_fails_naming_the_model_and_keeps_it(tmp_path, servers):
    written = registry.write_model(tmp_path / "registry", size=MB)
    reg = servers(Registry, tmp_path / "registry")
    ollama = servers(Ollama, tmp_path / "ollama", models=tmp_path / "models")
    name, pin = reg.model(), "sha256:" + "0" * 64
    failed = run(ollama, "pull", "--model", name, "--digest", pin, "--insecure", tmp=tmp_path)
    assert failed.returncode == 1
    assert failed.stderr == (f"model {name}: its manifest is sha256:{written['digest']}, not the pinned {pin} (the "
                             "registry moved the tag, or the pin is wrong); Ollama keeps what it pulled: correct the "
                             "digest or the name\n")  # fmt: skip
    assert run(ollama, "check", "--model", name, "--digest", pin, tmp=tmp_path).stdout == (
        f"differs {name} sha256:{written['digest']}\n"
    )


def test_a_blob_that_does_not_match_its_digest_fails_naming_the_model(tmp_path, servers):
    written = registry.write_model(tmp_path / "registry", size=MB, corrupt=True)
    reg = servers(Registry, tmp_path / "registry")
    ollama = servers(Ollama, tmp_path / "ollama", models=tmp_path / "models")
    failed = run(ollama, "pull", "--model", reg.model(), "--insecure", tmp=tmp_path)
    want = written["manifest"]["layers"][0]["digest"]
    assert failed.returncode == 1
    assert failed.stderr.startswith(f"pull of {reg.model()} failed: digest mismatch, file must be downloaded again: "
                                    f"want {want}, got sha256:")  # fmt: skip
    assert run(ollama, "check", "--model", reg.model(), tmp=tmp_path).stdout == f"missing {reg.model()}\n"


def test_a_registry_asked_over_https_fails_naming_the_model(tmp_path, servers):
    """Without llm_runtime_insecure Ollama asks https (images.go), which the plain-HTTP test registry refuses."""
    registry.write_model(tmp_path / "registry", size=MB)
    reg = servers(Registry, tmp_path / "registry")
    ollama = servers(Ollama, tmp_path / "ollama", models=tmp_path / "models")
    failed = run(ollama, "pull", "--model", reg.model(), tmp=tmp_path)
    assert failed.returncode == 1
    assert failed.stderr.startswith(f'pull of {reg.model()} failed: pull model manifest: Get "https://')


def test_a_pull_cut_short_resumes_where_it_stopped(tmp_path, servers):
    """The script killed mid-pull (a cancelled play): Ollama keeps the part's progress, the next pull asks only for
    the rest (server/download.go)."""
    size = 4 * MB
    written = registry.write_model(tmp_path / "registry", size=size)
    reg = servers(Registry, tmp_path / "registry", bytes_per_second=2 * MB)
    ollama = servers(Ollama, tmp_path / "ollama", models=tmp_path / "models")
    first = subprocess.Popen(
        pull_argv(ollama, reg.model(), tmp_path),
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        start_new_session=True,
    )
    try:

        def halfway() -> bool:
            line = parse_progress((tmp_path / "progress").read_text()) if (tmp_path / "progress").exists() else None
            return line is not None and line.done >= MB

        wait_for(halfway, timeout=20, what="a quarter of the model pulled")
    finally:
        stop(first)
    model = written["manifest"]["layers"][0]
    part = tmp_path / "models" / "blobs" / f"sha256-{model['digest'][7:]}-partial-0"
    wait_for(lambda: (part_file(part) or {}).get("Completed", 0) >= MB,  # None while Ollama rewrites it
             what="Ollama recorded how far the part got")  # fmt: skip
    time.sleep(0.2)  # the cancelled download leaves Ollama's download manager just after it records its part
    reg.throttle(0)
    before = reg.blob_bytes()
    again = run(ollama, "pull", "--model", reg.model(), "--insecure", tmp=tmp_path)
    assert again.returncode == 0, again.stderr
    assert again.stdout.splitlines()[-1] == f"pulled {reg.model()} sha256:{written['digest']}"
    small = written["size"] - model["size"]
    assert reg.blob_bytes() - before - small <= size - MB  # only what the first pull had not fetched
    resumed = next(p for p in progress_lines(again.stdout) if p.total)
    assert resumed.done >= MB  # its bar starts where the first one stopped


def test_a_pull_goes_on_when_ollama_restarts_under_it(tmp_path, servers):
    """systemd's Restart=always brings Ollama back; the script waits for it and pulls again, which resumes."""
    written = registry.write_model(tmp_path / "registry", size=4 * MB)
    reg = servers(Registry, tmp_path / "registry", bytes_per_second=2 * MB)
    ollama = servers(Ollama, tmp_path / "first", models=tmp_path / "models")
    argv = pull_argv(ollama, reg.model(), tmp_path, "--retries", "3")
    pulling = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        wait_for(lambda: (tmp_path / "progress").exists() and parse_progress((tmp_path / "progress").read_text()).done
                 > 0, timeout=20, what="the pull under way")  # fmt: skip
        stop(ollama.proc)
        reg.throttle(0)
        servers(Ollama, tmp_path / "second", models=tmp_path / "models", port=ollama.port)
        out, err = pulling.communicate(timeout=120)
    finally:
        if pulling.poll() is None:
            pulling.kill()
            pulling.wait()
    assert pulling.returncode == 0, err
    assert out.splitlines()[-1] == f"pulled {reg.model()} sha256:{written['digest']}"
    blob = tmp_path / "models" / "blobs" / f"sha256-{written['manifest']['layers'][0]['digest'][7:]}"
    assert hashlib.sha256(blob.read_bytes()).hexdigest() == written["manifest"]["layers"][0]["digest"][7:]


def test_ollama_not_answering_fails_in_one_line(tmp_path):
    argv = [*SCRIPT, "check", "--model", "tiny", "--url", "http://127.0.0.1:9"]
    out = subprocess.run(argv, capture_output=True, text=True, timeout=30)
    assert out.returncode == 1 and len(out.stderr.splitlines()) == 1
    assert out.stderr.startswith("Ollama at http://127.0.0.1:9 does not answer GET /api/tags: ")
    bad = subprocess.run([*argv[:-2], "--digest", "sha256:abc"], capture_output=True, text=True, timeout=30)
    assert bad.returncode == 2 and "not a manifest digest" in bad.stderr
