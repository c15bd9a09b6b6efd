"""gpu_rent.project.state: phase transitions, the state file (atomic, never silently reset) and the project lock."""

import json
import os
import signal
import stat
import subprocess
import sys
import textwrap
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from gpu_rent.project.state import Phase, Scope, State, StateCorrupt, StateError, StateLocked, StateStore, allowed

REPO = Path(__file__).resolve().parents[2]
ID, P, B, RC, RT = Phase.IDLE, Phase.PROVISIONING, Phase.BOOTSTRAPPING, Phase.READY_CLOUD, Phase.READY_TUNNELED

ALLOWED = [
    (ID, P),
    (P, B), (P, ID),
    (B, RC), (B, P), (B, ID),
    (RC, RT), (RC, B), (RC, P), (RC, ID),
    (RT, RC), (RT, B), (RT, P), (RT, ID),  # RT -> P: an up while the tunnel runs re-checks everything
]  # fmt: skip
FORBIDDEN = [(ID, B), (ID, RC), (ID, RT), (P, RC), (P, RT), (B, RT)]


def test_phase_names() -> None:
    assert [p.value for p in Phase] == ["idle", "provisioning", "bootstrapping", "ready_cloud", "ready_tunneled"]


def test_every_pair_is_classified() -> None:
    listed = set(ALLOWED) | set(FORBIDDEN)
    for a in Phase:
        for b in Phase:
            if a != b:
                assert (a, b) in listed, (a, b)
                assert allowed(a, b) == ((a, b) in ALLOWED)


@pytest.mark.parametrize(("start", "target"), ALLOWED, ids=lambda p: str(p))
def test_allowed_transition(start: Phase, target: Phase) -> None:
    state = State(phase=start)
    now = datetime(2025, 11, 29, 20, 31, 5, 123456, tzinfo=UTC)
    assert state.move_to(target, reason="test", now=now) is True
    assert state.phase is target
    assert state.transitions == [{"phase": target.value, "at": "2025-11-29T20:31:05Z", "reason": "test"}]


@pytest.mark.parametrize(("start", "target"), FORBIDDEN, ids=lambda p: str(p))
def test_forbidden_transition(start: Phase, target: Phase) -> None:
    state = State(phase=start)
    with pytest.raises(StateError) as caught:
        state.move_to(target)
    assert str(caught.value) == f"cannot go from {start.value} to {target.value}"
    assert state.phase is start
    assert state.transitions == []


@pytest.mark.parametrize("phase", list(Phase))
def test_same_phase_is_a_noop(phase: Phase) -> None:
    state = State(phase=phase)
    assert state.move_to(phase) is False
    assert state.transitions == []


@pytest.mark.parametrize("phase", list(Phase))
def test_any_phase_can_go_idle(phase: Phase) -> None:
    assert allowed(phase, Phase.IDLE)


def test_unknown_phase_name() -> None:
    with pytest.raises(StateError, match="unknown phase 'running'"):
        State().move_to("running")


def test_timestamps_and_since() -> None:
    state = State()
    t0 = datetime(2025, 1, 2, 3, 4, 5, tzinfo=UTC)
    state.move_to("provisioning", now=t0)
    state.move_to(Phase.BOOTSTRAPPING, now=t0 + timedelta(minutes=2))
    state.move_to(Phase.PROVISIONING, reason="server lost", now=t0 + timedelta(minutes=3))
    assert state.since(Phase.PROVISIONING) == t0 + timedelta(minutes=3)
    assert state.since("bootstrapping") == t0 + timedelta(minutes=2)
    assert state.since(Phase.READY_CLOUD) is None
    assert [t["reason"] for t in state.transitions] == [None, None, "server lost"]


def test_default_time_is_now_in_utc() -> None:
    state = State()
    before = datetime.now(UTC).replace(microsecond=0)
    state.move_to(Phase.PROVISIONING)
    at = state.since(Phase.PROVISIONING)
    assert at is not None
    assert state.transitions[0]["at"].endswith("Z")
    assert before <= at <= datetime.now(UTC)


def test_operation_bookkeeping() -> None:
    state = State()
    state.begin_operation("up", "network", now=datetime(2025, 1, 1, tzinfo=UTC))
    assert state.operation == {
        "command": "up",
        "step": "network",
        "pid": os.getpid(),
        "started_at": "2025-01-01T00:00:00Z",
    }
    state.set_step("server")
    assert state.operation["step"] == "server"
    state.end_operation()
    assert state.operation is None
    with pytest.raises(StateError):
        state.set_step("x")


def full_state() -> State:
    state = State(pool="ru-7a", flavor="gpu.a100.1")
    state.move_to(Phase.PROVISIONING, reason="up", now=datetime(2025, 1, 1, 10, tzinfo=UTC))
    state.resources.update(server="srv-1", data_volume="vol-2", floating_ip_address="203.0.113.9", custom="x")
    state.cloud = Scope("0f3e-project", "ru-7")
    state.begin_operation("up", "server")
    return state


def test_json_round_trip() -> None:
    state = full_state()
    data = json.loads(json.dumps(state.to_json()))
    assert data["phase"] == "provisioning"
    assert data["cloud"] == {"project_id": "0f3e-project", "region": "ru-7"}
    assert State.from_json(data) == state


def test_a_state_from_before_the_cloud_was_recorded_reads_as_not_knowing_it() -> None:
    data = full_state().to_json()
    del data["cloud"]
    assert State.from_json(data).cloud is None
    assert State.from_json({**data, "cloud": {"project_id": "p", "region": None}}).cloud == Scope("p", None)


@pytest.mark.parametrize(
    "mutate",
    [
        lambda d: d.update(phase="running"),
        lambda d: d.pop("phase"),
        lambda d: d.update(pool=3),
        lambda d: d.update(resources=["srv-1"]),
        lambda d: d.update(resources={"server": 1}),
        lambda d: d.update(transitions={}),
        lambda d: d["transitions"].append({"phase": "nope", "at": "2025-01-01T00:00:00Z"}),
        lambda d: d["transitions"].append({"phase": "idle", "at": "yesterday"}),
        lambda d: d["transitions"].append({"phase": ["idle"], "at": "2025-01-01T00:00:00Z"}),
        lambda d: d.update(operation="up"),
        lambda d: d.update(cloud="ru-7"),
        lambda d: d.update(cloud={"project_id": 7, "region": "ru-7"}),
        lambda d: d.update(version="1"),
        lambda d: d.update(version=99),
    ],
)
def test_from_json_rejects(mutate) -> None:
    data = full_state().to_json()
    mutate(data)
    with pytest.raises(StateCorrupt) as caught:
        State.from_json(data)
    assert caught.value.moved_to is None
    assert "\n" not in str(caught.value)


# --- the store ------------------------------------------------------------------------------------------------------


def test_missing_file_is_fresh_state(tmp_path: Path) -> None:
    store = StateStore(tmp_path)
    assert store.load() == State()
    assert not store.dir.exists()  # reading creates nothing


def test_a_peek_reads_what_is_there_and_never_moves_a_file_aside(tmp_path: Path) -> None:
    """connect compares the state's cloud with its login before the command has loaded the state: that look must
    leave an unreadable file for load to report and move aside, once."""
    store = StateStore(tmp_path)
    assert store.peek() is None
    store.save(full_state())
    assert store.peek() == full_state()
    store.path.write_text('{"phase": "provisi')
    assert store.peek() is None and store.path.exists()
    store.path.write_text('{"phase": "idle", "cloud": "ru-7"}')
    assert store.peek() is None and list(store.dir.glob("state.json.corrupt-*")) == []


def test_save_load_is_atomic_private_and_ignored(tmp_path: Path) -> None:
    store = StateStore(tmp_path)
    state = full_state()
    store.save(state)
    assert store.path == tmp_path / ".gpu-rent" / "state.json"
    assert store.load() == state
    assert stat.S_IMODE(store.path.stat().st_mode) == 0o600
    assert (store.dir / ".gitignore").read_text() == "*\n"
    state.move_to(Phase.BOOTSTRAPPING)
    store.save(state)
    assert store.load().phase is Phase.BOOTSTRAPPING
    assert sorted(p.name for p in store.dir.iterdir()) == [".gitignore", "state.json"]


def test_save_failure_leaves_old_file_and_no_temp(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    store = StateStore(tmp_path)
    store.save(full_state())
    before = store.path.read_bytes()

    def boom(*_args: object) -> None:
        raise OSError("disk full")

    monkeypatch.setattr(os, "replace", boom)
    new = full_state()
    new.move_to(Phase.IDLE)
    with pytest.raises(OSError, match="disk full"):
        store.save(new)
    assert store.path.read_bytes() == before
    assert sorted(p.name for p in store.dir.iterdir()) == [".gitignore", "state.json"]


@pytest.mark.parametrize(
    ("content", "reason"),
    [
        (b"\x00\xff\xfe garbage \x80", "not UTF-8 text"),
        (b'{"phase": "provisioning", "pool": ', "not JSON"),
        (b"", "not JSON"),
        (json.dumps({"version": 1, "phase": "exploding"}).encode(), "unknown phase 'exploding'"),
    ],
    ids=["garbage", "truncated", "empty", "unknown-phase"],
)
def test_corrupt_file_is_moved_aside(tmp_path: Path, content: bytes, reason: str) -> None:
    store = StateStore(tmp_path)
    store.ensure_dir()
    store.path.write_bytes(content)
    start = datetime.now(UTC).replace(microsecond=0)
    with pytest.raises(StateCorrupt) as caught:
        store.load()
    error = caught.value
    assert error.moved_to is not None
    assert error.moved_to.parent == store.dir
    assert error.moved_to.read_bytes() == content
    assert not store.path.exists()
    stamp = error.moved_to.name.removeprefix("state.json.corrupt-")
    moved_at = datetime.strptime(stamp, "%Y%m%dT%H%M%SZ").replace(tzinfo=UTC)
    assert start <= moved_at <= datetime.now(UTC)
    assert reason in error.reason
    message = str(error)
    assert "\n" not in message
    name = error.moved_to.name
    rebuilt = "`gpu-rent status` rebuilds it from the cloud"
    assert message == f".gpu-rent/state.json was unreadable ({error.reason}); moved to {name}; {rebuilt}"
    # The next load starts fresh, and the evidence stays.
    assert store.load() == State()
    assert error.moved_to.exists()


def test_two_corrupt_files_in_one_second_keep_both(tmp_path: Path) -> None:
    store = StateStore(tmp_path)
    store.ensure_dir()
    moved = []
    for content in (b"one", b"two"):
        store.path.write_bytes(content)
        with pytest.raises(StateCorrupt) as caught:
            store.load()
        moved.append(caught.value.moved_to)
    assert moved[0] != moved[1]
    assert [m.read_bytes() for m in moved] == [b"one", b"two"]


# --- the lock -------------------------------------------------------------------------------------------------------

HOLDER = textwrap.dedent(
    """
    import sys, time
    from pathlib import Path
    from gpu_rent.project.state import StateStore
    with StateStore(Path(sys.argv[1])).lock("up"):
        print("locked", flush=True)
        sys.stdin.readline()
    """
)


@pytest.fixture
def holder(tmp_path: Path):
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    proc = subprocess.Popen(
        [sys.executable, "-c", HOLDER, str(tmp_path)], stdin=subprocess.PIPE, stdout=subprocess.PIPE, env=env, text=True
    )
    try:
        assert proc.stdout is not None
        assert proc.stdout.readline().strip() == "locked"
        yield proc
    finally:
        if proc.poll() is None:
            proc.kill()
        proc.wait(timeout=10)


def test_lock_held_by_another_process(tmp_path: Path, holder: subprocess.Popen) -> None:
    store = StateStore(tmp_path)
    started = time.monotonic()
    with pytest.raises(StateLocked) as caught, store.lock("stop", wait=0.3):
        pass
    elapsed = time.monotonic() - started
    assert 0.3 <= elapsed < 2
    error = caught.value
    assert (error.command, error.pid) == ("up", holder.pid)
    message = str(error)
    assert "\n" not in message
    assert message.startswith(f"another gpu-rent command is running in this project: 'up' (pid {holder.pid}, since ")
    assert message.endswith("); wait for it or stop it with Ctrl+C")


@pytest.mark.parametrize("ending", ["exit", "sigkill"])
def test_lock_is_free_after_holder_ends(tmp_path: Path, holder: subprocess.Popen, ending: str) -> None:
    store = StateStore(tmp_path)
    if ending == "exit":
        assert holder.stdin is not None
        holder.stdin.write("done\n")
        holder.stdin.flush()
    else:
        holder.send_signal(signal.SIGKILL)
    holder.wait(timeout=10)
    started = time.monotonic()
    with store.lock("up", wait=0.3):
        record = json.loads(store.holder_path.read_text())
        assert (record["command"], record["pid"]) == ("up", os.getpid())
    assert time.monotonic() - started < 0.3


def test_lock_within_one_process(tmp_path: Path) -> None:
    store = StateStore(tmp_path)
    with store.lock("up"):
        assert (store.dir / ".gitignore").exists()
        with pytest.raises(StateLocked) as caught, StateStore(tmp_path).lock("stop", wait=0):
            pass
        assert caught.value.command == "up"
    with store.lock("stop", wait=0):
        pass
    assert store.holder_path.read_text() == ""  # a released lock leaves no record behind


def test_locked_message_without_a_record() -> None:
    assert str(StateLocked()) == (
        "another gpu-rent command is running in this project; wait for it or stop it with Ctrl+C"
    )


def test_a_state_path_that_is_not_a_file_is_one_line_naming_it(tmp_path):
    store = StateStore(tmp_path)
    (tmp_path / ".gpu-rent" / "state.json").mkdir(parents=True)
    with pytest.raises(StateError, match=r"state\.json is a folder, not the state file: move it away"):
        store.load()
    (tmp_path / ".gpu-rent" / "state.json").rmdir()
    (tmp_path / ".gpu-rent").rmdir()
    (tmp_path / ".gpu-rent").write_text("a file where the folder goes\n")
    with pytest.raises(StateError, match=r"\.gpu-rent is not a folder: gpu-rent keeps its runtime files there"):
        store.load()
    with pytest.raises(StateError, match=r"\.gpu-rent is not a folder"):
        store.save(State())
    assert (tmp_path / ".gpu-rent").read_text() == "a file where the folder goes\n"  # nothing lost


def test_a_state_nested_past_the_parser_is_moved_aside_as_corrupt(tmp_path):
    store = StateStore(tmp_path)
    store.ensure_dir()
    store.path.write_text('{"phase": "idle", "operation": ' + "[" * 100_000 + "]" * 100_000 + "}")
    with pytest.raises(StateCorrupt, match="nested too deeply to be a state file"):
        store.load()
    assert store.load() == State()
