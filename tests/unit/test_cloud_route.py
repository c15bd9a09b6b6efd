"""status's kept route: used only for the very configuration openstacksdk resolved it from, never readable by
others, holding no password; an SDK that reads other files than the route hashes fails here first."""

import importlib.metadata
import json
import os
import stat
import subprocess
import sys
import time
from pathlib import Path

import pytest

from gpu_rent.cloud import route as cloud_route
from gpu_rent.cloud.route import CALLS, Call, Route
from gpu_rent.project.env import CloudAuth
from gpu_rent.project.state import Scope

REPO = Path(__file__).resolve().parents[2]
PASSWORD = "hunter2-secret"


def route(expires_in: float = 3600) -> Route:
    headers = {"OpenStack-API-Version": "x 1.1"}
    calls = {name: Call("http://127.0.0.1:9/v1", f"/{name}", headers, name, {}) for name in CALLS}
    expires_at = float(int(time.time() + expires_in))
    return Route(calls, "tok-123", expires_at, True, None, 'cloud "test" (http://127.0.0.1:9/v3)', Scope("p-1", "R"))


def os_auth(**options: str) -> CloudAuth:
    values = {"auth_url": "http://127.0.0.1:9/v3", "username": "u", "password": PASSWORD, "project_name": "p"}
    return CloudAuth(options=tuple(sorted({**values, **options}.items())))


def kept(auth: CloudAuth, runtime: Path, files: list[str] | None = None, expires_in: float = 3600) -> Path:
    runtime.mkdir(exist_ok=True)
    path = runtime / cloud_route.FILE
    files = cloud_route.candidate_files(auth) if files is None else files
    cloud_route.write(route(expires_in), auth, files, path)
    return path


def test_the_route_file_is_private_names_no_password_and_comes_back_whole(tmp_path):
    auth = os_auth()
    path = kept(auth, tmp_path / ".gpu-rent")
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    assert PASSWORD not in path.read_text() and "tok-123" in path.read_text()
    assert cloud_route.load(auth, tmp_path / ".gpu-rent") == route()
    assert cloud_route.fits(auth, tmp_path)


def test_other_options_another_password_or_another_folder_miss(tmp_path, monkeypatch):
    auth = os_auth()
    kept(auth, tmp_path / ".gpu-rent")
    assert cloud_route.load(auth, tmp_path / ".gpu-rent") is not None
    for other in (os_auth(password="changed"), os_auth(project_name="q"), os_auth(region_name="RegionTwo")):
        assert cloud_route.load(other, tmp_path / ".gpu-rent") is None
        assert not cloud_route.fits(other, tmp_path)
    monkeypatch.chdir(tmp_path)  # openstack.config looks for clouds.yaml in the working folder
    assert cloud_route.load(auth, tmp_path / ".gpu-rent") is None


def test_a_token_near_its_end_sends_status_to_the_sdk_but_the_configuration_still_fits(tmp_path):
    auth = os_auth()
    kept(auth, tmp_path / ".gpu-rent", expires_in=15 * 60)  # under the 20 minutes a kept token must have
    assert cloud_route.load(auth, tmp_path / ".gpu-rent") is None
    assert cloud_route.fits(auth, tmp_path)


def test_a_changed_byte_in_clouds_yaml_misses(tmp_path, clouds_yaml):
    clouds = clouds_yaml(test="s3cret-password")
    auth = CloudAuth(cloud="test", config_file=clouds)
    kept(auth, tmp_path / ".gpu-rent")
    assert cloud_route.fits(auth, tmp_path)
    clouds.write_text(clouds.read_text().replace("RegionOne", "RegionOnf"))
    assert not cloud_route.fits(auth, tmp_path)


def test_a_broken_route_file_is_no_route(tmp_path):
    auth = os_auth()
    path = kept(auth, tmp_path / ".gpu-rent")
    body = json.loads(path.read_text())
    path.write_text(json.dumps({**body, "calls": {"servers": body["calls"]["servers"]}}))
    assert cloud_route.load(auth, tmp_path / ".gpu-rent") is None
    path.write_text(json.dumps({k: v for k, v in body.items() if k != "scope"}))  # kept before the scope was
    assert cloud_route.load(auth, tmp_path / ".gpu-rent") is None
    path.write_text("{not json")
    assert cloud_route.load(auth, tmp_path / ".gpu-rent") is None and not cloud_route.fits(auth, tmp_path)


# Where openstack.config looks depends on the working folder and the home folder as the process started: a fresh
# python there, writing the route, then making a file appear where the SDK would read it.
APPEARS = """
import json, sys
from pathlib import Path
from gpu_rent.cloud import route as cloud_route
from gpu_rent.project.env import CloudAuth
from tests.unit.test_cloud_route import kept

auth = CloudAuth(cloud="test", config_file=Path(sys.argv[1]))
runtime = Path.cwd() / ".gpu-rent"
kept(auth, runtime)
seen = {"before": cloud_route.fits(auth, Path.cwd())}
Path("clouds.yaml").write_text("clouds: {}\\n")  # not read: the project names its clouds.yaml
seen["clouds.yaml here"] = cloud_route.fits(auth, Path.cwd())
secure = Path.home() / ".config" / "openstack" / "secure.yaml"
secure.parent.mkdir(parents=True)
secure.write_text("clouds: {test: {auth: {password: other}}}\\n")  # read: merged over clouds.yaml
seen["secure.yaml at home"] = cloud_route.fits(auth, Path.cwd())
kept(auth, runtime)
seen["kept again"] = cloud_route.fits(auth, Path.cwd())
secure.unlink()
seen["secure.yaml gone"] = cloud_route.fits(auth, Path.cwd())
print(json.dumps(seen))
"""


def test_a_file_appearing_where_openstack_config_looks_misses(tmp_path, clouds_yaml):
    clouds = clouds_yaml(test="s3cret-password")
    home = tmp_path / "home"
    home.mkdir()
    env = {k: v for k, v in os.environ.items() if not k.startswith("XDG_")}
    env |= {"HOME": str(home), "PYTHONPATH": str(REPO)}
    result = subprocess.run([sys.executable, "-c", APPEARS, str(clouds)], cwd=home, env=env,
                            capture_output=True, text=True, timeout=120)  # fmt: skip
    assert result.returncode == 0, result.stderr
    assert json.loads(result.stdout) == {
        "before": True,
        "clouds.yaml here": True,
        "secure.yaml at home": False,
        "kept again": True,
        "secure.yaml gone": False,
    }


@pytest.mark.parametrize("named", [True, False])
def test_the_files_hashed_are_the_ones_openstack_config_reads(tmp_path, clouds_yaml, named):
    """Pinned against the SDK itself: a release that reads another list of files, or others, fails here."""
    from openstack.config import loader

    auth = CloudAuth(cloud="test", config_file=clouds_yaml(test="pw")) if named else os_auth()
    config = auth.openstack_config()
    lists = sorted(name for name, value in vars(config).items() if name.endswith("_files") and isinstance(value, list))
    assert lists == ["_config_files", "_secure_files", "_vendor_files"]
    read = config._config_files + config._secure_files + config._vendor_files
    assert cloud_route.candidate_files(auth) == read
    if named:
        assert read == [str(auth.config_file), *loader.SECURE_FILES, *loader.VENDOR_FILES]
        assert {"CONFIG_FILES", "SECURE_FILES", "VENDOR_FILES"} <= set(vars(loader))


def test_the_installed_sdk_is_named_with_its_version():
    assert cloud_route.sdk_installed() == [f"openstacksdk-{importlib.metadata.version('openstacksdk')}.dist-info"]
