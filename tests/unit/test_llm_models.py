"""ollama-models.yaml: the LLM runtime's models, checked before anything is rented (issue 17).

Ollama's names are judged as its types/model/name.go judges them (ParseName, then Name.IsValid, as the
pull handler does through server/model_resolver.go); the cases below are upstream's name_test.go
testCases, read with ParseName's defaults (registry.ollama.ai, library, latest) filled in.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from typer.testing import CliRunner

from gpu_rent.project import llm_models
from gpu_rent.project import settings as config
from gpu_rent.project.errors import ConfigError
from gpu_rent.project.llm_models import MODELS_FILE, ModelsFileError, load, ollama_name_parts, ollama_name_problem

SHA = "ab" * 32
PART80, PART350 = "x" * 80, "x" * 350


def write(tmp_path: Path, text: str) -> Path:
    (tmp_path / MODELS_FILE).write_text(text)
    return tmp_path


def error(tmp_path: Path, text: str, runtime: str = "ollama") -> str:
    with pytest.raises(ModelsFileError) as caught:
        load(write(tmp_path, text), runtime)
    message = str(caught.value)
    assert "\n" not in message, message
    return message


# ---------------------------------------------------------------- Ollama's names
@pytest.mark.parametrize(
    ("name", "valid"),
    [
        ("_why/_the/_lucky:_stiff", True),
        ("h/n/m:t", True),
        ("host/namespace/model:tag", True),
        ("host/namespace/model", True),  # unqualified for ParseNameBare; ParseName fills the tag in
        ("namespace/model", True),
        ("model", True),
        (f"{PART80}/{PART80}/{PART80}:{PART80}", True),
        (f"{PART350}/{PART80}/{PART80}:{PART80}", True),
        ("h/nn/mm:t", True),
        ("host:https/namespace/model:tag", True),
        ("127.0.0.1:5000/library/tiny:latest", True),  # a host with a port, as a registry of one's own
        ("127.0.0.1:5000/library/tiny", True),  # the ':' before the last '/' is the host's, not a tag
        ("https://registry.example.org/team/model:q4", True),  # a protocol scheme before the host
        ("hf.co/bartowski/Llama-3.2-1B-Instruct-GGUF:Q4_K_M", True),
        ("llama3.2:1b", True),
        ("qwen3:local", True),  # internal/modelref ParseRef takes ":local" off
        ("", False),
        ("n/m:", False),
        ("@t", False),
        ("m@d", False),
        ("^", False),
        ("mm:", False),
        ("/nn/mm", False),
        ("//", False),
        ("//mm", False),
        ("hh//", False),
        ("//mm:@", False),
        ("00@", False),
        ("@", False),
        ("-hh/nn/mm:tt", False),
        ("hh/-nn/mm:tt", False),
        ("hh/nn/-mm:tt", False),
        ("hh/nn/mm:-tt", False),
        ("host/name:space/model:tag", False),
        ("name.space/model", False),  # a namespace takes no '.'
        (f"{PART80}x", False),  # a model of 81
        (f"{PART350}x/n/m", False),  # a host of 351
        ("llama 3", False),
        ("modèle", False),  # name.go: ASCII letters and digits only
        ("gpt-oss:20b:cloud", False),  # runs on ollama.com, not on the VM's GPU
        ("gpt-oss:120b-cloud", False),
    ],
)
def test_names_are_judged_by_ollamas_own_rules(name, valid):
    assert (ollama_name_problem(name) is None) is valid, ollama_name_problem(name)


def test_a_name_gets_parsenames_defaults():
    assert ollama_name_parts("llama3.2") == {
        "host": "registry.ollama.ai", "namespace": "library", "model": "llama3.2", "tag": "latest",
    }  # fmt: skip
    assert ollama_name_parts("127.0.0.1:5000/library/tiny") == {
        "host": "127.0.0.1:5000", "namespace": "library", "model": "tiny", "tag": "latest",
    }  # fmt: skip


@pytest.mark.parametrize(
    ("name", "said"),
    [
        ("llama 3", "name 'llama 3' is not an Ollama model name: its model 'llama 3' is not 1-80 of letters"),
        ("name.space/model", "its namespace 'name.space' is not 1-80 of letters, digits and _ -,"),
        ("n/m:", "its tag is missing"),
        ("llama3.2@sha256:" + SHA, "has an '@': a digest goes in digest:, not in the name"),
        ("gpt-oss:20b:cloud", "is an Ollama cloud model: it runs on ollama.com, not on this VM's GPU"),
    ],
)
def test_a_bad_name_says_which_part_and_why(name, said):
    assert said in ollama_name_problem(name)


# ---------------------------------------------------------------- the file
def test_no_file_means_no_models_and_runtime_none_ignores_even_a_broken_file(tmp_path):
    assert load(tmp_path, "ollama") == [] and load(tmp_path, "llamacpp") == []
    write(tmp_path, "ollama: [\n")
    assert load(tmp_path, "none") == []
    assert load(write(tmp_path, ""), "ollama") == []  # empty: no models
    assert load(write(tmp_path, "# nothing yet\n"), "llamacpp") == []


@pytest.mark.parametrize("runtime", ["ollama", "llamacpp"])
def test_a_models_file_that_is_a_directory_is_refused_not_taken_as_no_models(tmp_path, runtime):
    (tmp_path / MODELS_FILE).mkdir()
    with pytest.raises(ModelsFileError) as caught:
        load(tmp_path, runtime)
    assert str(caught.value) == "ollama-models.yaml: is a directory, not a file"
    assert load(tmp_path, "none") == []  # without a runtime the file is read by nothing


def test_each_runtime_gets_its_own_part_normalised(tmp_path):
    write(
        tmp_path,
        f"""\
ollama:
  - llama3.2:1b
  - name: qwen3:4b
    digest: sha256:{SHA.upper()}
  - {{name: 127.0.0.1:5000/library/tiny:latest, digest: {SHA}, insecure: true}}
llamacpp:
  - url: https://huggingface.co/org/repo/resolve/main/Model-Q4_K_M.gguf?download=true
    sha256: {SHA.upper()}
    serve: true
  - {{url: "https://example.org/dl?id=3", sha256: {SHA}, name: other-q8.gguf}}
""",
    )
    assert load(tmp_path, "ollama") == [
        {"name": "llama3.2:1b", "digest": None, "insecure": False},
        {"name": "qwen3:4b", "digest": f"sha256:{SHA}", "insecure": False},
        {"name": "127.0.0.1:5000/library/tiny:latest", "digest": f"sha256:{SHA}", "insecure": True},  # as /api/tags
    ]
    assert load(tmp_path, "llamacpp") == [
        {"url": "https://huggingface.co/org/repo/resolve/main/Model-Q4_K_M.gguf?download=true", "sha256": SHA,
         "name": "Model-Q4_K_M.gguf", "serve": True},
        {"url": "https://example.org/dl?id=3", "sha256": SHA, "name": "other-q8.gguf", "serve": False},
    ]  # fmt: skip


@pytest.mark.parametrize(
    ("text", "line", "message"),
    [
        # the line is where the mistake is; the message starts so
        ("ollama: [\n", 2, "is not readable YAML: while parsing a flow node"),
        ("ollama:\n  - name: a\n   digest: x\n", 3, "is not readable YAML: "),
        ("- llama3.2\n", 1, "must be a mapping with ollama and/or llamacpp"),
        ("ollama: []\nmodels: []\n", 2, "unknown part models (allowed: ollama, llamacpp)"),
        ("ollama: llama3.2\n", 1, "ollama must be a list"),
        ("ollama:\n  - 3\n", 2, "ollama[1]: must be a name or a mapping of name, digest"),
        ("ollama:\n  - name: a\n    tag: b\n", 3, "ollama[1]: unknown key tag (allowed: name, digest, insecure)"),
        ("ollama:\n  - name: a\n    name: b\n", 3, "name is given twice (lines 2 and 3)"),
        # values PyYAML parses but cannot construct: a ValueError, a traceback before
        ("ollama:\n  - name: a\n    insecure: " + "9" * 5000 + "\n", 3,
         "is not readable YAML: Exceeds the limit (4300 digits) for integer string conversion"),
        ("ollama:\n  - name: a\n    digest: 2024-13-01\n", 3, "is not readable YAML: month must be in 1..12"),
        ("ollama:\n  - x\n  - {name: 'llama 3'}\n", 3, "ollama[2]: name 'llama 3' is not an Ollama model name"),
        ("ollama:\n  - {}\n", 2, "ollama[1]: name must be an Ollama model name such as llama3.2:1b"),
        ("ollama:\n  - name: a\n    digest: sha256:12\n", 3, "ollama[1]: digest must be sha256:<64 hex digits>"),
        (f"ollama:\n  - name: a\n    digest: md5:{SHA}\n", 3, "ollama[1]: digest must be sha256:<64 hex digits>"),
        ("ollama:\n  - llama3.2\n  - llama3.2:latest\n", 3, "ollama[2]: llama3.2:latest is ollama[1] again (line 2)"),
        ("ollama:\n  - Qwen3:4B\n  - registry.ollama.ai/library/qwen3:4b\n", 3,
         "ollama[2]: registry.ollama.ai/library/qwen3:4b is ollama[1] again (line 2)"),  # name.go EqualFold
        # the other runtime's part is checked too: one file, one truth
        ("llamacpp:\n  - {url: 'https://e.org/a.gguf'}\n", 2,
         "llamacpp[1]: sha256 must be 64 hex digits (a model file is always checked)"),
    ],
)  # fmt: skip
def test_mistakes_are_one_line_naming_file_line_and_entry(tmp_path, text, line, message):
    said = error(tmp_path, text)
    assert said.startswith(f"{MODELS_FILE}:{line}: {message}"), said


ONE_SERVE = "the one llama-server serves"


@pytest.mark.parametrize(
    ("entries", "line", "message"),
    [
        (f"  - {{url: 'file:///etc/a.gguf', sha256: {SHA}, serve: true}}\n", 2,
         "llamacpp[1]: url must be a https or http URL of a GGUF file"),
        (f"  - {{url: 'https://e.org/a.safetensors', sha256: {SHA}, serve: true}}\n", 2,
         "llamacpp[1]: name 'a.safetensors' must be a plain file name ending in .gguf"),
        (f"  - {{url: 'https://e.org/a.gguf', sha256: {SHA}, name: ../a.gguf, serve: true}}\n", 2,
         "llamacpp[1]: name '../a.gguf' must be a plain file name"),
        (f"  - {{url: 'https://e.org/a.gguf', sha256: {SHA}, serve: 'yes please'}}\n", 2,
         "llamacpp[1]: serve must be true or false"),
        (f"  - {{url: 'https://e.org/a.gguf', sha256: {SHA}, size: 3}}\n", 2,
         "llamacpp[1]: unknown key size (allowed: url, sha256, name, serve)"),
        (f"  - {{url: 'https://e.org/a.gguf', sha256: {SHA}}}\n", 1,
         f"llamacpp: exactly one model is marked serve: true ({ONE_SERVE}); none is"),
        (f"  - {{url: 'https://e.org/a.gguf', sha256: {SHA}, serve: true}}\n"
         f"  - {{url: 'https://f.org/b.gguf', sha256: {SHA}, serve: true}}\n", 3,
         f"llamacpp: exactly one model is marked serve: true ({ONE_SERVE}); 2 are (lines 2, 3)"),
        (f"  - {{url: 'https://e.org/a.gguf', sha256: {SHA}, serve: true}}\n"
         f"  - {{url: 'https://f.org/x/A.gguf', sha256: {SHA}}}\n", 3,
         "llamacpp[2]: A.gguf is llamacpp[1] again (line 2)"),  # one file name on the VM
    ],
)  # fmt: skip
def test_llamacpp_mistakes_are_one_line_too(tmp_path, entries, line, message):
    said = error(tmp_path, "llamacpp:\n" + entries, "llamacpp")
    assert said.startswith(f"{MODELS_FILE}:{line}: {message}"), said


# ---------------------------------------------------------------- through the settings
VARS = "POOL=ru-7a\nFLAVOR=gpu.a100.1\nIMAGE=Ubuntu 22.04 LTS 64-bit\n"


def project(tmp_path: Path, runtime: str, models: str | None) -> Path:
    (tmp_path / "gpu-rent.vars").write_text(VARS + f"LLM_RUNTIME={runtime}\n")
    if models is not None:
        write(tmp_path, models)
    return tmp_path


def test_settings_carry_the_runtimes_models_to_the_playbooks(tmp_path):
    settings = config.load(project(tmp_path, "ollama", "ollama: [llama3.2:1b]\n"), with_cloud=False)
    wanted = [{"name": "llama3.2:1b", "digest": None, "insecure": False}]
    assert settings.llm_runtime == "ollama" and settings.llm_models == wanted
    found = settings.ansible_vars()
    assert found["gpu_rent_llm_models"] == wanted
    assert found["gpu_rent_llm_release_url"] is None  # the role's default: upstream's release
    assert (found["gpu_rent_llm_runtime"], found["gpu_rent_llm_local_port"], found["gpu_rent_llm_remote_port"]) == (
        "ollama", 21434, 11434,
    )  # fmt: skip
    assert found["gpu_rent_idle_llm"] is True
    assert config.load(project(tmp_path, "none", "ollama: [\n"), with_cloud=False).llm_models == []


def test_a_bad_models_file_is_a_config_error_naming_its_line(tmp_path):
    with pytest.raises(ConfigError) as caught:
        config.load(project(tmp_path, "llamacpp", "llamacpp:\n  - {url: x}\n"), with_cloud=False)
    assert (caught.value.file, caught.value.line) == (MODELS_FILE, 2)
    assert str(caught.value) == "ollama-models.yaml:2: llamacpp[1]: url must be a https or http URL of a GGUF file"


def _gpu_rent_imports(module) -> list[str]:
    source = Path(module.__file__).read_text()
    return [line for line in source.splitlines() if line.startswith(("import", "from")) and "gpu_rent" in line]


def test_llm_models_imports_only_leaves_of_gpu_rent_the_name_parser_and_the_file_readers():
    # config imports llm_models; the reverse would be the cycle config <-> seed_list had
    from gpu_rent.on_vm import ollama_name
    from gpu_rent.project import text_file, yaml_loader

    assert _gpu_rent_imports(llm_models) == [
        "from gpu_rent.on_vm import ollama_name",
        "from gpu_rent.project import text_file, yaml_loader",
    ]
    assert _gpu_rent_imports(ollama_name) == []  # a leaf, and copied alone beside llm_pull.py on the VM
    assert _gpu_rent_imports(text_file) == [] and _gpu_rent_imports(yaml_loader) == []


def test_dry_run_refuses_a_bad_models_file_in_one_line_before_the_cloud(dead_cloud_project):
    from gpu_rent.cli.app import app

    with (dead_cloud_project / "gpu-rent.vars").open("a") as f:
        f.write("LLM_RUNTIME=ollama\n")
    write(dead_cloud_project, "ollama:\n  - llama3.2:1b\n  - name: qwen3:4b\n    digest: sha256:123\n")
    for command in (["dry-run"], ["up", "--yes"]):
        result = CliRunner().invoke(app, [*command, "--project", str(dead_cloud_project)])
        assert result.exit_code == 2, result.output
        lines = [line for line in result.output.splitlines() if line.strip()]
        assert lines == ["error: ollama-models.yaml:4: ollama[2]: digest must be sha256:<64 hex digits>"], lines
        assert not (dead_cloud_project / ".gpu-rent" / "state.json").exists()


@pytest.mark.parametrize(
    ("entry", "said"),
    [
        ("{name: llama3.2:1b, insecure: true}", "ollama-models.yaml:2: ollama[1]: insecure: true needs a registry"),
        ("{name: library/llama3.2:1b, insecure: true}", "ollama[1]: insecure: true needs a registry host"),
        ("{name: registry.ollama.ai/library/x:1, insecure: true}", "ollama[1]: insecure: true needs a registry host"),
        ("{name: Registry.Ollama.AI:443/library/x:1, insecure: true}", "ollama[1]: insecure: true needs a registry"),
        ("{name: ollama.com/library/x:1, insecure: true}", "ollama[1]: insecure: true needs a registry host"),
        ("{name: 10.0.0.5:5000/library/x:1, insecure: yes please}", "ollama[1]: insecure must be true or false"),
    ],
)
def test_plain_http_is_only_for_a_registry_the_entry_names(tmp_path, entry, said):
    """`insecure` sends Ollama's pull over HTTP: never to Ollama's own registry by a slip of the pen."""
    with pytest.raises(llm_models.ModelsFileError) as bad:
        load(write(tmp_path, f"ollama:\n  - {entry}\n"), "ollama")
    assert said in str(bad.value)
