"""A server made from the image runs its idle-killer from its first boot: the create's user data installs it
(roles/idle_killer/tasks/first_boot.yml renders it, plugins/module_utils/gpu_rent_first_boot.py packs it).

The role renders it here through the real `ansible-playbook` on localhost, from the real files: its size against
Nova's limit, the files against what the arm installs, the installer run into a folder standing in for /, and the
first tick on its config, which takes the server and credential the create carries from the metadata service.
What cloud-init itself does with it on a VM is the ground's (docs/idle-killer.md, "Handed over before any SSH").
"""

from __future__ import annotations

import base64
import gzip
import json
import os
import stat
import subprocess
import sys
from pathlib import Path

import pytest

from gpu_rent.on_vm import handoff, idle_killer, paths
from gpu_rent.on_vm.idle_killer import Config
from tests.module_file import load
from tests.unit import test_idle_handoff as handing
from tests.unit import test_idle_killer_proof as proof
from tests.unit.test_idle_handoff import FIP, NEW, handed

REPO = Path(__file__).resolve().parents[2]
first_boot = load("gpu_rent_first_boot", REPO / "plugins" / "module_utils" / "gpu_rent_first_boot.py")
fresh_server = load("fresh_server_first_boot", REPO / "plugins" / "modules" / "fresh_server.py")
cloud_answering = proof.cloud_answering  # the loopback Keystone and Nova, as a fixture here too
metadata = handing.metadata  # the loopback metadata service, as a fixture here too
ROLE = REPO / "roles" / "idle_killer"
# Room kept below Nova's limit: the laptop's liblzma and zlib may pack a few bytes worse than this machine's.
HEADROOM = 1024
# What only the arm knows, and what the first boot finds not installed yet: the keys where the two configs differ.
FIRST_BOOT_ONLY = {"server_id", "floating_ip_id", "credential_id", "credential_secret", "credential_expires_at",
                   "rental_started_at", "swarmui_url", "data_mount", "models_dirs", "llm", "keep_alive_command",
                   "grace_seconds"}  # fmt: skip
PLAY = """
- hosts: localhost
  gather_facts: false
  vars:
    gpu_rent_cloud_auth: {auth: {auth_url: "https://keystone.example/v3"}, region_name: ru-7}
    gpu_rent_server_id: 11111111-2222-3333-4444-555555555555
    gpu_rent_floating_ip_id: aaaaaaaa-bbbb-cccc-dddd-eeeeeeeeeeee
    gpu_rent_server_created_at: "2026-12-06T10:00:00Z"
    gpu_rent_billing_hour: rental
    gpu_rent_keep_alive_command: /mnt/swarm_data/still-busy
    gpu_rent_idle_grace_minutes: 2
    idle_killer_made: {id: made-id, secret: made-secret, expires_at: "2026-12-13T10:00:00Z"}
  tasks:
    - ansible.builtin.include_role: {name: idle_killer, tasks_from: first_boot.yml, public: true}
    - name: The units as program_units.yml installs them.
      ansible.builtin.template: {src: "ROLE/templates/{{ item }}.j2", dest: "OUT/units/{{ item }}", mode: "0644"}
      loop: "{{ idle_killer_unit_names }}"
    - ansible.builtin.copy:
        content: "{{ {'first_boot': idle_killer_first_boot, 'arm': idle_killer_config,
                      'modules': idle_killer_modules, 'units': idle_killer_unit_names} | to_json }}"
        dest: OUT/rendered.json
        mode: "0600"
"""


@pytest.fixture(scope="module")
def rendered(tmp_path_factory) -> dict:
    """What the role renders on the controller: the first boot's files and config, the arm's config, the units as
    the template module writes them."""
    out = tmp_path_factory.mktemp("first-boot")
    (out / "units").mkdir()
    (out / "play.yml").write_text(PLAY.replace("ROLE", str(ROLE)).replace("OUT", str(out)))
    (out / "ansible.cfg").write_text("[defaults]\n")
    env = {k: v for k, v in os.environ.items() if not k.startswith("ANSIBLE_")}
    env |= {"ANSIBLE_CONFIG": str(out / "ansible.cfg"), "ANSIBLE_ROLES_PATH": str(REPO / "roles"),
            "ANSIBLE_LOCALHOST_WARNING": "0", "ANSIBLE_INVENTORY_UNPARSED_WARNING": "0"}  # fmt: skip
    playbook = Path(sys.executable).with_name("ansible-playbook")
    argv = [str(playbook), str(out / "play.yml"), "-e", f"ansible_python_interpreter={sys.executable}"]
    done = subprocess.run(argv, cwd=out, env=env, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    found = json.loads((out / "rendered.json").read_text())
    found["written_units"] = {name: (out / "units" / name).read_text() for name in found["units"]}
    return found


def test_the_user_data_fits_novas_limit_with_room_to_spare(rendered):
    encoded = first_boot.user_data(rendered["first_boot"])
    margin = first_boot.LIMIT - len(encoded)
    print(f"first boot's user data: {len(encoded)} bytes after base64, {margin} below Nova's {first_boot.LIMIT}")
    assert margin >= HEADROOM, (
        f"the first boot's user data is {len(encoded)} bytes after base64, {margin} below Nova's {first_boot.LIMIT} "
        f"(wanted {HEADROOM}): the killer's package outgrew it, see gpu_rent_first_boot.py SIZE_NOTES"
    )
    assert first_boot.too_big(encoded) is None


def test_over_the_limit_the_create_is_refused_in_one_line_naming_the_size(rendered):
    big = dict(rendered["first_boot"], files={**rendered["first_boot"]["files"],
                                              "/x": base64.b64encode(os.urandom(60_000)).decode()})  # fmt: skip
    data, refused = fresh_server.create_user_data(False, big)
    assert refused == (
        f"the first boot's user data is {len(data)} bytes after base64, over Nova's 65535: the idle-killer's package "
        "outgrew it (plugins/module_utils/gpu_rent_first_boot.py SIZE_NOTES)"
    )
    assert "\n" not in refused and len(data) > 65535


def test_a_boot_volume_never_booted_gets_the_installer_a_kept_one_keeps_its_host_keys(rendered):
    """Made by the create (several pools) or by the volumes role just before (one pool), a volume from the image is
    booted with the installer and cloud-init's default host keys (the volume's own); a kept one keeps its keys."""
    for volumes_exist in (False, True):
        data, refused = fresh_server.create_user_data(volumes_exist, rendered["first_boot"])
        script = gzip.decompress(base64.b64decode(data)).decode()
        assert refused is None and script.startswith("#!/usr/bin/python3\n")  # cloud-init runs a #! part as a script
    assert fresh_server.create_user_data(True, None) == (fresh_server.KEEP_HOST_KEYS_USER_DATA, None)
    assert fresh_server.create_user_data(False, None) == (None, None)


def test_the_files_are_the_ones_the_arm_installs_byte_for_byte(rendered):
    """The arm after it finds them in place (program_files.yml copies the modules, program_units.yml templates the
    units): nothing to change, nothing restarted."""
    files = rendered["first_boot"]["files"]
    program = rendered["first_boot"]["program_dir"]
    assert program == paths.PROGRAM_DIR
    expected = {f"{program}/on_vm/{name}" for name in rendered["modules"]}
    expected |= {f"/etc/systemd/system/{name}" for name in rendered["units"]}
    assert set(files) == expected
    for name in rendered["modules"]:
        assert files[f"{program}/on_vm/{name}"] == (REPO / "gpu_rent" / "on_vm" / name).read_text(), name
    for name, text in rendered["written_units"].items():
        assert files[f"/etc/systemd/system/{name}"] == text, name
    assert f"--config {paths.CONFIG_FILE}" in files["/etc/systemd/system/gpu-rent-idle-killer.service"]
    assert rendered["first_boot"]["start"] == ["gpu-rent-idle-killer.timer", "gpu-rent-last-breath.service"]


def test_the_first_boots_config_is_the_arms_but_for_what_only_the_arm_knows(rendered):
    first = json.loads(rendered["first_boot"]["config"])
    arm = rendered["arm"]
    assert set(first) == set(arm)
    assert {k for k in arm if first[k] != arm[k]} <= FIRST_BOOT_ONLY
    assert arm["server_id"] and arm["credential_secret"] == "made-secret" and arm["rental_started_at"]  # given
    assert (first["server_id"], first["credential_id"], first["credential_secret"]) == ("", None, None)  # no secret
    assert (first["floating_ip_id"], first["credential_expires_at"], first["rental_started_at"]) == (None, None, None)
    assert (first["swarmui_url"], first["data_mount"], first["models_dirs"], first["llm"]) == ("", "", [], False)
    assert first["metadata_url"] == paths.METADATA_URL and first["billing_hour"] == "rental"
    assert rendered["first_boot"]["config_file"] == paths.CONFIG_FILE
    # the user's command may need what is not installed yet, and user data is readable by any process on the VM
    assert arm["keep_alive_command"] and first["keep_alive_command"] == ""
    # a live laptop's SSH and arm come within the first boot's grace, whatever IDLE_GRACE_MINUTES says
    assert first["grace_seconds"] == max(float(arm["grace_seconds"]), 600.0)


def here(tmp_path: Path) -> dict:
    """The config's files on the VM, in tmp_path instead: no test touches this machine's /run or /var/lib."""
    return {"instance_data_file": str(tmp_path / "instance-data.json"), "status_file": str(tmp_path / "status.json"),
            "memory_file": str(tmp_path / "lib" / "memory.json"), "last_words_file": str(tmp_path / "lib" / "lw.json"),
            "hold_file": str(tmp_path / "hold"), "seeding_lock": str(tmp_path / "seeding")}  # fmt: skip


def run_installer(rendered: dict, root: Path) -> list[list[str]]:
    """The installer cloud-init would run, into root; the systemctl calls it made."""
    script = gzip.decompress(base64.b64decode(first_boot.user_data(rendered["first_boot"])))
    (root / "installer").write_bytes(script)
    bin_dir = root / "bin"
    bin_dir.mkdir(exist_ok=True)
    (bin_dir / "systemctl").write_text(f'#!/bin/sh\necho "$@" >> {root / "systemctl.log"}\n')
    (bin_dir / "systemctl").chmod(0o755)
    env = {"PATH": f"{bin_dir}:/usr/bin:/bin", "PYTHONDONTWRITEBYTECODE": "1"}
    done = subprocess.run([sys.executable, str(root / "installer"), str(root)], env=env, capture_output=True,
                          text=True, timeout=60)  # fmt: skip
    assert done.returncode == 0, done.stderr
    log = root / "systemctl.log"
    return [line.split() for line in log.read_text().splitlines()] if log.exists() else []


def test_the_installer_lays_the_files_writes_the_config_root_only_then_starts_the_units(rendered, tmp_path):
    called = run_installer(rendered, tmp_path)
    for path, text in rendered["first_boot"]["files"].items():
        written = tmp_path / path.lstrip("/")
        assert written.read_text() == text and stat.S_IMODE(written.stat().st_mode) == 0o644, path
    config = tmp_path / paths.CONFIG_FILE.lstrip("/")
    assert config.read_text() == rendered["first_boot"]["config"] + "\n"  # as the arm writes it: and a newline
    assert stat.S_IMODE(config.stat().st_mode) == 0o600 and stat.S_IMODE(config.parent.stat().st_mode) == 0o700
    assert Config.load(config).server_id == ""
    assert called == [
        ["daemon-reload"],
        ["enable", "--now", "--no-block", "gpu-rent-idle-killer.timer", "gpu-rent-last-breath.service"],
    ]
    assert not [p for p in tmp_path.rglob(".gpu-rent-*")]  # no partial file left


def test_the_installer_never_replaces_a_config_the_arm_wrote_first(rendered, tmp_path):
    """sshd is up before cloud-init's final stage: the arm may come first, and its config (its credential) stays."""
    config = tmp_path / paths.CONFIG_FILE.lstrip("/")
    config.parent.mkdir(parents=True, mode=0o700)
    armed = json.dumps(rendered["arm"], indent=4, sort_keys=True) + "\n"
    config.write_text(armed)
    run_installer(rendered, tmp_path)
    assert config.read_text() == armed


def test_the_first_tick_takes_the_server_and_credential_handed_to_it(rendered, tmp_path, cloud_answering, metadata):
    """The first boot's config as the role renders it, on a VM whose metadata service names it and hands it the
    credential the create carried: the tick adopts both as a new arming (the grace from now), proves it, and the
    arm's config, written after, replaces it, the secret taken from what the VM holds."""
    cloud = cloud_answering(200, {"server": {"id": NEW, "status": "ACTIVE"}})
    service = metadata(NEW, handed())
    raw = json.loads(rendered["first_boot"]["config"])
    raw |= {"auth_url": f"{cloud.url}/v3", "metadata_url": service.url, "gpu_percent": None, "shell": False,
            "credential_check_seconds": 0, **here(tmp_path)}  # fmt: skip
    path = tmp_path / "gpu-rent" / "idle-killer.json"
    assert idle_killer.first_boot(path, json.dumps(raw)) == 0
    cfg = Config.load(path)
    assert (cfg.server_id, cfg.credential_id, cfg.swarmui_url, cfg.data_mount, cfg.llm) == ("", None, "", "", False)
    now = 1_800_000_100.0
    taken = idle_killer.take_handoff(path, cfg, now)
    assert (taken.server_id, taken.credential_id, taken.credential_secret) == (NEW, "new-cred", "new-secret")
    assert taken.armed_at == now and taken.floating_ip_id == FIP  # a new arming, and the address handed with it
    status = idle_killer.tick(taken, now=now, say=lambda line: None)
    assert status["server_id"] == NEW and status["credential"]["state"] == "ok"
    assert status["reason"].startswith("grace after boot")  # from the adoption: grace, then IDLE_MINUTES
    assert ("GET", f"/compute/v2.1/servers/{NEW}") in cloud.asked
    # the arm, the laptop alive: its config replaces the first boot's whole, the secret filled in from the VM's
    arm = dict(rendered["arm"], server_id=NEW, credential_id="new-cred", credential_secret=None,
               auth_url=f"{cloud.url}/v3", metadata_url=service.url, **here(tmp_path))  # fmt: skip
    handoff.forget()
    assert idle_killer.arm(path, json.dumps(arm, indent=4, sort_keys=True), None) == 0
    armed = json.loads(path.read_text())
    assert armed == dict(arm, credential_secret="new-secret")
    assert armed["swarmui_url"] and armed["data_mount"] == paths.DATA_MOUNT and "armed_at" not in armed


def test_an_arm_before_the_first_tick_replaces_the_first_boots_config_the_secret_from_the_metadata(
    rendered, tmp_path, cloud_answering, metadata
):
    """The arm over SSH often comes before the first tick (a minute after cloud-init's last stage): the config it
    finds holds no credential, and the one up handed the server is read where up put it."""
    cloud = cloud_answering(200, {"server": {"id": NEW, "status": "ACTIVE"}})
    service = metadata(NEW, handed())
    path = tmp_path / "gpu-rent" / "idle-killer.json"
    assert idle_killer.first_boot(path, rendered["first_boot"]["config"] + "\n") == 0
    arm = dict(rendered["arm"], server_id=NEW, credential_id="new-cred", credential_secret=None,
               auth_url=f"{cloud.url}/v3", metadata_url=service.url, **here(tmp_path))  # fmt: skip
    handoff.forget()
    assert idle_killer.arm(path, json.dumps(arm, indent=4, sort_keys=True), None) == 0
    assert json.loads(path.read_text()) == dict(arm, credential_secret="new-secret")
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
