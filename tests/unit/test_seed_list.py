"""seed.yml: what the VM is seeded with, checked before anything is rented."""

from pathlib import Path

import pytest

from gpu_rent.project.errors import ConfigError
from gpu_rent.project.seed_list import load

SHA = "ab" * 32


def write(tmp_path: Path, text: str) -> Path:
    (tmp_path / "seed.yml").write_text(text)
    return tmp_path


def test_no_file_means_nothing_to_seed(tmp_path):
    assert load(tmp_path) == {"extensions": [], "autocomplete": [], "models": []}


def test_entries_are_normalised_with_names_and_versions(tmp_path):
    seeded = load(
        write(
            tmp_path,
            f"""
extensions:
  - https://github.com/someone/SwarmUI-Ext.git
  - {{url: git://10.231.7.1/Other.git, version: v1.2, name: other}}
autocomplete:
  - https://example.org/lists/danbooru.csv
models:
  - {{url: "https://example.org/m/model.safetensors?download=1", sha256: "{SHA.upper()}", folder: Stable-Diffusion}}
  - {{civitai: 128713, sha256: "{SHA}", folder: Lora/style, name: detail.safetensors}}
""",
        )
    )
    assert seeded["extensions"] == [
        {"url": "https://github.com/someone/SwarmUI-Ext.git", "version": "HEAD", "name": "SwarmUI-Ext"},
        {"url": "git://10.231.7.1/Other.git", "version": "v1.2", "name": "other"},
    ]
    assert seeded["autocomplete"] == [
        {"url": "https://example.org/lists/danbooru.csv", "sha256": None, "name": "danbooru.csv"}
    ]
    assert seeded["models"][0]["name"] == "model.safetensors" and seeded["models"][0]["sha256"] == SHA
    assert seeded["models"][1] == {
        "url": None, "civitai": 128713, "sha256": SHA, "folder": "Lora/style", "name": "detail.safetensors",
    }  # fmt: skip


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("extensions: [1]", "seed.yml: extensions[1]: must be a URL or a mapping"),
        ("extension: []", "seed.yml: unknown part extension"),
        ("models: {url: x}", "seed.yml: models must be a list"),
        (f"models: [{{url: 'https://e.org/a.bin', folder: Lora, sha256: '{SHA[:10]}'}}]", "models[1]: sha256 must be"),
        ("models: [{url: 'https://e.org/a.bin', folder: Lora}]", "models[1]: sha256 must be 64 hex"),
        (f"models: [{{civitai: 12, sha256: '{SHA}', folder: Lora}}]", "models[1]: name must be a plain file name"),
        (f"models: [{{civitai: 12, url: 'https://e.org/a', sha256: '{SHA}', folder: L}}]", "either url or civitai"),
        (f"models: [{{civitai: -3, sha256: '{SHA}', folder: Lora, name: a}}]", "civitai must be a model version id"),
        (f"models: [{{url: 'https://e.org/a.bin', sha256: '{SHA}', folder: ../etc}}]", "folder must be a folder"),
        (f"models: [{{url: 'file:///etc/passwd', sha256: '{SHA}', folder: Lora}}]", "url must be a https or http URL"),
        (f"models: [{{url: 'https://e.org/a.bin', sha256: '{SHA}', folder: L, name: ../x}}]", "name must be a plain"),
        (f"models: [{{url: 'https://e.org/a.bin', sha256: '{SHA}', folder: L, size: 3}}]", "unknown key size"),
        ("extensions: [https://e.org/x.git, https://f.org/x.git]", "extensions: two entries have the same name"),
        ("extensions: [{url: https://e.org/x.git, version: ''}]", "version must be a branch, tag or commit"),
        ("[1, 2]", "must be a mapping"),
        ("models: [", "is not readable YAML"),
        # values PyYAML parses but cannot construct: a ValueError, a traceback before
        (
            f"models: [{{civitai: {'9' * 5000}, sha256: '{SHA}', folder: L}}]",
            "is not readable YAML: Exceeds the limit (4300 digits) for integer string conversion",
        ),
        ("extensions: [{url: https://e.org/x.git, version: 2024-13-01}]", "is not readable YAML: month must be in"),
    ],
)
def test_mistakes_are_one_line_naming_the_entry(tmp_path, text, message):
    with pytest.raises(ConfigError) as caught:
        load(write(tmp_path, text))
    assert message in str(caught.value)
    assert "\n" not in str(caught.value)


@pytest.mark.parametrize(
    ("text", "message"),
    [
        # the second models: would drop every model of the first
        (f"models:\n  - {{civitai: 1, sha256: '{SHA}', folder: L, name: a}}\nmodels: []\n",
         "seed.yml:3: models is given twice (lines 1 and 3)"),
        (f"models:\n  - civitai: 1\n    sha256: '{SHA}'\n    folder: Lora\n    folder: Stable-Diffusion\n    name: a\n",
         "seed.yml:5: folder is given twice (lines 4 and 5)"),
        ("extensions: [{url: https://e.org/x.git, url: https://f.org/y.git}]",
         "seed.yml:1: url is given twice (lines 1 and 1)"),
    ],
    ids=["a part", "a key of an entry", "in a flow mapping"],
)  # fmt: skip
def test_a_key_given_twice_is_refused_on_its_line(tmp_path, text, message):
    with pytest.raises(ConfigError) as caught:
        load(write(tmp_path, text))
    assert str(caught.value) == message


def test_a_merge_key_may_still_be_overridden(tmp_path):
    text = f"models:\n  - &m {{civitai: 1, sha256: '{SHA}', folder: Lora, name: a}}\n  - {{<<: *m, name: b}}\n"
    assert [model["name"] for model in load(write(tmp_path, text))["models"]] == ["a", "b"]


def test_a_seed_list_that_is_a_directory_is_refused_not_taken_as_nothing_to_seed(tmp_path):
    (tmp_path / "seed.yml").mkdir()
    with pytest.raises(ConfigError) as caught:
        load(tmp_path)
    assert str(caught.value) == "seed.yml: is a directory, not a file"
