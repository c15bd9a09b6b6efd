"""The idle-killer's decision, rule by rule (SPEC §7, the order of issue 13): what keeps a VM, and when it goes.

It stays one file past 500 lines: the rules are tested in the order decide() applies them, each
beside the one that outranks it."""

import itertools
from dataclasses import replace

import pytest

from gpu_rent.on_vm.idle_decision import (
    BUSY_COUNTERS,
    DELETE,
    KEEP,
    Decision,
    Limits,
    LlmLook,
    Memory,
    Observation,
    decide,
    our_backends,
)

MIN = 60.0
LIMITS = Limits(idle_seconds=30 * MIN, grace_seconds=45 * MIN, cap_seconds=60 * MIN)
# every signal on, as the role arms it by default (IDLE_GPU_PERCENT=10)
ALL_ON = replace(LIMITS, gpu_percent=10)
BOOT = 1_000_000.0
LATE = BOOT + 50 * MIN  # past the grace


def running(**counters) -> dict:
    base = {"waiting_gens": 0, "live_gens": 0, "waiting_backends": 0, "loading_models": 0}
    return {"status": base | counters, "backend_status": {"status": "running", "class": "", "message": ""}}


def seen(now: float = LATE, **kw) -> Observation:
    return Observation(now=now, booted_at=BOOT, **({"status": running()} | kw))


def run(ticks: list[Observation], memory: Memory | None = None, limits: Limits = LIMITS) -> list[Decision]:
    """Tick after tick, each handing its memory to the next, as the program does."""
    out, memory = [], memory or Memory()
    for tick in ticks:
        decision = decide(tick, limits, memory)
        out.append(decision)
        memory = decision.memory
    return out


def test_an_empty_queue_deletes_exactly_idle_minutes_after_it_went_empty():
    ticks = [seen(LATE + m * MIN) for m in range(0, 31)]
    decisions = run(ticks)
    assert all(d.action == KEEP for d in decisions[:30])
    assert decisions[0].fires_at == LATE + 30 * MIN and decisions[0].reason == "queue empty, idle for 0 min"
    assert decisions[30].action == DELETE and "idle for 30 min" in decisions[30].reason


@pytest.mark.parametrize(
    ("counters", "named"),
    [
        ({"waiting_gens": 2}, "2 waiting gens"),
        ({"live_gens": 1}, "1 live gens"),
        ({"waiting_backends": 1}, "1 waiting backends"),
        ({"loading_models": 1}, "1 loading models"),
    ],
)
def test_any_work_keeps_the_vm_names_it_and_restarts_the_clock(counters, named):
    first, busy, after = run([seen(LATE), seen(LATE + 29 * MIN, status=running(**counters)), seen(LATE + 31 * MIN)])
    assert first.action == KEEP
    assert busy.action == KEEP and busy.reason == named and busy.fires_at is None
    assert busy.memory.idle_since is None
    assert after.action == KEEP and after.fires_at == LATE + 61 * MIN  # the clock began again


def test_the_comfyui_queue_counts_as_work():
    decision = decide(seen(comfy_queue=3), LIMITS, Memory(idle_since=LATE - 40 * MIN))
    assert decision.action == KEEP and decision.reason == "3 in the ComfyUI queue"


def test_a_hold_keeps_the_vm_until_it_ends_then_the_clock_runs_from_there():
    hold = LATE + 90 * MIN
    decisions = run([seen(LATE, hold_until=hold), seen(hold - MIN, hold_until=hold), seen(hold, hold_until=hold)])
    assert [d.action for d in decisions] == [KEEP, KEEP, KEEP]
    assert decisions[0].reason == "hold for 90 min more"
    assert decisions[2].fires_at == hold + 30 * MIN  # a hold in the past is no hold


def test_the_grace_after_boot_keeps_even_a_long_empty_queue():
    decision = decide(seen(BOOT + 44 * MIN), LIMITS, Memory(idle_since=BOOT - 100 * MIN))
    assert decision.action == KEEP and decision.reason == "grace after boot, 1 min left"
    assert decision.memory.idle_since is None


def test_the_seeding_lock_keeps_the_vm_while_it_is_valid_and_not_after():
    assert decide(seen(seeding_until=LATE + 1), LIMITS, Memory(idle_since=0)).action == KEEP
    stale = decide(seen(seeding_until=LATE - 1), LIMITS, Memory(idle_since=LATE - 31 * MIN))
    assert stale.action == DELETE  # a crashed seeding run cannot keep it alive for good


def test_a_download_being_written_keeps_the_vm_and_is_named():
    decision = decide(seen(downloads=("Lora/x.safetensors.download.tmp", "b.tmp")), LIMITS, Memory(idle_since=0))
    assert decision.action == KEEP
    assert decision.reason == "download of Lora/x.safetensors.download.tmp and 1 more"


@pytest.mark.parametrize(
    ("kw", "named"),
    [
        ({"status": None, "error": "connection refused"}, "SwarmUI not answering (connection refused)"),
        ({"status": {"error_id": "invalid_session_id"}}, "SwarmUI answers with an error: invalid_session_id"),
        (
            {
                "status": {
                    "error_id": "bad_permissions",
                    "error": "You lack permissions for this route.",
                    "route": "GetGlobalStatus",
                }
            },
            "SwarmUI answers GetGlobalStatus with bad_permissions (You lack permissions for this route.)",
        ),
        (
            {"status": {"error_id": "bad_route", "error": "Unknown API route", "route": "GetGlobalStatus"}},
            "SwarmUI answers GetGlobalStatus with bad_route (Unknown API route)",
        ),
        (
            {"status": {"error_id": "basic_api", "error": "missing session id", "route": "GetNewSession"}},
            "SwarmUI answers GetNewSession with basic_api (missing session id)",
        ),
        ({"backends": ("errored",)}, "0 of 1 ComfyUI backend running (1 errored)"),
        ({"backends": ("loading", "errored")}, "0 of 2 ComfyUI backends running (1 errored, 1 loading)"),
        ({"backends": ()}, "no ComfyUI backend of gpu-rent's (dlbackend/ComfyUI/main.py) in SwarmUI's backends"),
        # a ComfyUI that runs but does not answer GET /prompt may hold Comfy-tab prompts: not an empty queue
        ({"backends": ("running",), "comfy_silent": (7821,)}, "ComfyUI on port 7821 does not tell its queue"),
        ({"comfy_silent": (7821, 7822)}, "ComfyUI on port 7821, 7822 does not tell its queue"),
        ({"data_volume": "not mounted at /mnt/swarm_data"}, "data volume not mounted at /mnt/swarm_data"),
        (
            {"data_volume": "at /mnt/swarm_data lacks its marker .gpu-rent-ready"},
            "data volume at /mnt/swarm_data lacks its marker .gpu-rent-ready",
        ),
        ({"status": {"backend_status": {"status": "loading"}}}, "backend loading, not running"),
        ({"status": {"backend_status": {"status": "idle"}}}, "backend idle, not running"),  # idle: none started
        ({"status": {"backend_status": {"status": "errored"}}}, "backend errored, not running"),
        # work SwarmUI's service runs outside every counter and queue (idle_look.installs_of)
        (
            {"installs": ("installing: pip install -r requirements.txt",)},
            "SwarmUI installing: pip install -r requirements.txt",
        ),
        (
            {"installs": ("installing: git clone https://x/y", "installing: pip install z")},
            "SwarmUI installing: git clone https://x/y and 1 more",
        ),
        (
            {"installs": ("converting: pickle-to-safetensors.py Models/Lora true",)},
            "SwarmUI converting: pickle-to-safetensors.py Models/Lora true",
        ),
    ],
)
def test_trouble_counts_as_busy_up_to_the_cap_then_the_clock_runs(kw, named):
    ticks = [seen(LATE + m * MIN, **kw) for m in (0, 59, 60, 89, 90)]
    first, before_cap, at_cap, before_end, end = run(ticks)
    assert first.action == KEEP and first.reason == f"{named}: counted as busy for 60 min more"
    assert before_cap.action == KEEP and before_cap.fires_at is None
    assert at_cap.action == KEEP and at_cap.fires_at == LATE + 90 * MIN and named in at_cap.reason
    assert before_end.action == KEEP
    assert end.action == DELETE and named in end.reason


def test_a_download_that_ends_past_the_cap_starts_the_full_idle_time_not_a_clock_from_the_past():
    down = {"status": None, "error": "connection refused"}
    ticks = [seen(LATE, **down), seen(LATE + 30 * MIN, downloads=("Lora/x.download.tmp",), **down)]
    ticks += [seen(LATE + m * MIN, **down) for m in (120, 149, 150)]
    _, downloading, ended, before_end, end = run(ticks)
    assert downloading.action == KEEP and downloading.reason.startswith("download of")
    assert ended.action == KEEP and ended.fires_at == LATE + 150 * MIN  # 30 min from the first idle look
    assert before_end.action == KEEP and end.action == DELETE


def test_some_loading_is_a_running_backend():
    status = running(loading_models=1) | {"backend_status": {"status": "some_loading"}}
    decision = decide(seen(status=status), LIMITS, Memory())
    assert decision.action == KEEP and decision.reason == "1 loading models"


def test_swarmui_answering_again_ends_the_trouble_and_its_count():
    down, back = run([seen(LATE, status=None), seen(LATE + MIN)])
    assert down.memory.troubled_since == LATE
    assert back.memory.troubled_since is None and back.reason == "queue empty, idle for 0 min"


def test_garbage_counters_are_read_as_zero_not_as_a_crash():
    decision = decide(seen(status=running(waiting_gens="x", live_gens=None)), LIMITS, Memory())
    assert decision.action == KEEP and decision.reason.startswith("queue empty")


def test_every_reason_is_one_line():
    cases = [seen(status=None, error="Traceback\n  line\nOSError"), seen(downloads=("x",)), seen(hold_until=LATE + 1)]
    for case in cases:
        assert "\n" not in decide(case, LIMITS, Memory()).reason


# ---------------------------------------------------------------- issue 13: work before trouble
ERRORED = running() | {"backend_status": {"status": "errored", "class": "error", "message": "A backend errored"}}
TROUBLES = {
    "data volume not mounted": {"data_volume": "not mounted at /mnt/swarm_data"},
    "SwarmUI not answering": {"status": None, "error": "connection refused"},
    "a 400 error": {"status": {"error_id": "bad_permissions", "error": "no", "route": "GetGlobalStatus"}},
    "aggregate errored, ListBackends unread": {"status": ERRORED, "backends_error": "bad_route Unknown API route"},
    "none of ours running": {"status": ERRORED, "backends": ("errored", "loading")},
    "none of ours at all": {"backends": ()},
    "LLM runtime not telling": {"llm": LlmLook("ollama", error="timed out", silent=True)},
}
# what keeps the VM, from the first rule on, each with the reason it must give
KEEPERS = {
    "hold": ({"hold_until": LATE + 10 * MIN}, "hold for 10 min more"),
    "grace": ({"now": BOOT + 40 * MIN}, "grace after boot, 5 min left"),
    "seeding": ({"seeding_until": LATE + 1}, "seeding runs (extensions, models or a push)"),
    "download": ({"downloads": ("Lora/x.download.tmp",)}, "download of Lora/x.download.tmp"),
    "ComfyUI queue": ({"comfy_queue": 2}, "2 in the ComfyUI queue"),
    "GPU": ({"gpus": ((0, 3.0, 900.0), (1, 87.0, 20000.0))}, "GPU 1 at 87 %"),
    "LLM runtime": (
        {"llm": LlmLook("ollama", models=(("llama3.2:1b", LATE + 4 * MIN),))},
        "LLM runtime: model llama3.2:1b loaded (keep-alive for 4 min more)",
    ),
    "KEEP_ALIVE_COMMAND": ({"keep_alive": True}, "KEEP_ALIVE_COMMAND exits 0"),
}
COUNTER_WORK = {k: ({"counter": k}, f"1 {k.replace('_', ' ')}") for k in BUSY_COUNTERS}


def staged(keeper: dict, trouble: dict) -> Observation:
    """One look with a keeper and a trouble at once; a counter keeper lands in whatever status there is."""
    kw = dict(trouble) | {k: v for k, v in keeper.items() if k != "counter"}
    if "counter" in keeper:
        status = kw.get("status", running())
        kw["status"] = status | {"status": status["status"] | {keeper["counter"]: 1}}
    return seen(**kw)


LONG_TROUBLE = Memory(troubled_since=LATE - 500 * MIN, idle_since=LATE - 400 * MIN)  # far past cap and idle time


@pytest.mark.parametrize("trouble", TROUBLES, ids=list(TROUBLES))
@pytest.mark.parametrize("keeper", KEEPERS, ids=list(KEEPERS))
def test_every_keeper_keeps_the_vm_whatever_the_trouble_and_however_long_it_lasted(keeper, trouble):
    kw, named = KEEPERS[keeper]
    decision = decide(staged(kw, TROUBLES[trouble]), ALL_ON, LONG_TROUBLE)
    assert decision.action == KEEP and decision.reason.startswith(named), decision.reason
    assert decision.fires_at is None and decision.memory.idle_since is None


# counters exist only in an answer: with no answer, or an error for one, there are none to see
COUNTER_TROUBLES = {k: v for k, v in TROUBLES.items() if k not in ("SwarmUI not answering", "a 400 error")}


@pytest.mark.parametrize("trouble", COUNTER_TROUBLES, ids=list(COUNTER_TROUBLES))
@pytest.mark.parametrize("counter", COUNTER_WORK, ids=list(COUNTER_WORK))
def test_any_counter_keeps_the_vm_though_the_aggregate_says_errored_and_the_trouble_is_named(counter, trouble):
    kw, named = COUNTER_WORK[counter]
    decision = decide(staged(kw, COUNTER_TROUBLES[trouble]), LIMITS, LONG_TROUBLE)
    assert decision.action == KEEP and decision.reason.startswith(f"{named}; "), decision.reason
    assert decision.memory.troubled_since is None  # work seen: the cap counts anew once it ends


@pytest.mark.parametrize(("higher", "lower"), list(itertools.combinations(KEEPERS, 2)))
def test_the_first_rule_that_keeps_names_the_reason(higher, lower):
    kw = KEEPERS[lower][0] | KEEPERS[higher][0]
    if "now" in kw and "hold_until" in kw:
        kw["hold_until"] = kw["now"] + 10 * MIN
    decision = decide(seen(**kw), ALL_ON, Memory())
    assert decision.reason.startswith(KEEPERS[higher][1]), decision.reason


def test_a_running_generation_with_a_second_errored_backend_keeps_the_vm_past_any_cap():
    # SwarmUI's aggregate says errored as soon as any backend errored (BackendHandler.CurrentBackendStatus)
    status = running(live_gens=1) | {"backend_status": {"status": "errored"}}
    ticks = [seen(LATE + m * MIN, status=status, backends=("running",)) for m in range(0, 300, 10)]
    assert all(d.action == KEEP and d.reason == "1 live gens" for d in run(ticks))


def test_one_of_our_backends_running_is_no_trouble_though_the_aggregate_says_errored():
    first, *_, last = run([seen(LATE + m * MIN, status=ERRORED, backends=("running", "errored")) for m in range(31)])
    assert first.reason == "queue empty, 1 of 2 ComfyUI backends running (1 errored), idle for 0 min"
    assert first.memory.troubled_since is None and first.fires_at == LATE + 30 * MIN
    assert last.action == DELETE  # the queue stayed empty: idle, not trouble


def test_the_idle_reason_counts_our_backends():
    decision = decide(seen(backends=("running", "running")), LIMITS, Memory())
    assert decision.reason == "queue empty, 2 of 2 ComfyUI backends running, idle for 0 min"


def test_a_listbackends_unread_falls_back_on_the_aggregate_and_says_why():
    fine = decide(seen(backends_error="bad_permissions"), LIMITS, Memory())
    assert fine.reason == "queue empty, idle for 0 min"
    troubled = decide(seen(status=ERRORED, backends_error="bad_permissions You lack"), LIMITS, Memory())
    assert troubled.reason.startswith("backend errored, not running (ListBackends: bad_permissions You lack)")


def test_the_comfyui_queue_keeps_the_vm_though_swarmui_does_not_answer_and_says_both():
    decision = decide(seen(status=None, error="timed out", comfy_queue=1), LIMITS, LONG_TROUBLE)
    assert decision.action == KEEP and decision.reason == "1 in the ComfyUI queue; SwarmUI not answering (timed out)"


def test_when_work_ends_during_trouble_the_cap_starts_from_then():
    down = {"status": None, "error": "connection refused"}
    ticks = [seen(LATE, **down), seen(LATE + 100 * MIN, comfy_queue=1, **down)]
    ticks += [seen(LATE + m * MIN, **down) for m in (101, 160, 161, 190, 191)]
    _, work, after, before_cap, at_cap, before_end, end = run(ticks)
    assert work.action == KEEP and work.memory.troubled_since is None
    assert after.reason == "SwarmUI not answering (connection refused): counted as busy for 60 min more"
    assert before_cap.fires_at is None and at_cap.fires_at == LATE + 191 * MIN
    assert before_end.action == KEEP and end.action == DELETE


def test_the_data_volume_is_named_before_swarmui_not_answering():
    decision = decide(seen(status=None, error="refused", data_volume="not mounted at /mnt/swarm_data"), LIMITS,
                      Memory())  # fmt: skip
    assert decision.reason == "data volume not mounted at /mnt/swarm_data: counted as busy for 60 min more"


def test_a_data_volume_grown_at_boot_is_work_until_the_hung_time_then_trouble_again():
    """The boot-time resize2fs runs before the mount (roles/data_volume): a delete would cut it and could damage
    the filesystem (money review #19), so it is work, named; one that outlasts hung_seconds is trouble again."""
    limits = replace(LIMITS, hung_seconds=60 * MIN)
    growing = {"status": None, "error": "refused", "data_volume": "not mounted at /mnt/swarm_data"}
    ticks = [seen(LATE + m * MIN, data_growing_since=LATE, **growing) for m in (0, 59, 60, 61)]
    start, late, hung, after = run(ticks, limits=limits)
    assert start.action == KEEP and start.fires_at is None
    assert start.reason.startswith("the data volume's filesystem grown at boot (resize2fs, 0 min so far); data volume")
    assert late.reason.startswith("the data volume's filesystem grown at boot (resize2fs, 59 min so far)")
    assert hung.reason == "data volume not mounted at /mnt/swarm_data: counted as busy for 60 min more"
    assert after.memory.troubled_since == LATE + 60 * MIN
    # with hung work switched off (IDLE_HUNG_MINUTES=off) the trouble cap bounds it: a grow never keeps a VM for ever
    within, beyond = run([seen(LATE + m * MIN, data_growing_since=LATE, **growing) for m in (59, 60)], limits=LIMITS)
    assert within.reason.startswith("the data volume's filesystem grown at boot (resize2fs, 59 min so far)")
    assert beyond.reason == "data volume not mounted at /mnt/swarm_data: counted as busy for 60 min more"


# The config cloud-init writes at a first boot from the image (roles/idle_killer vars idle_killer_first_boot_config):
# no SwarmUI to ask, no data volume checked (data_volume None), no LLM runtime asked (llm None).
FIRST_BOOT = {"status": None, "swarmui": False}


def test_at_a_first_boot_nothing_not_installed_yet_is_trouble_the_clock_runs_after_the_grace():
    """Before the arm installs anything, an absent SwarmUI is what the VM is, not a fault: the VM goes
    IDLE_MINUTES after the grace, not after the trouble's cap as well."""
    start, before, end = run([seen(LATE + m * MIN, **FIRST_BOOT) for m in (0, 29, 30)])
    assert start.reason == "SwarmUI not installed yet, idle for 0 min" and start.fires_at == LATE + 30 * MIN
    assert start.memory.troubled_since is None and before.action == KEEP
    assert end.action == DELETE and end.reason.endswith("idle for 30 min: deleting this server")
    # the very same look with SwarmUI installed is trouble, counted as busy up to the cap
    assert decide(seen(status=None, error="refused"), LIMITS, Memory()).reason.startswith("SwarmUI not answering")


@pytest.mark.parametrize(
    ("kw", "named"),
    [
        ({"now": BOOT + 10 * MIN}, "grace after boot, 35 min left"),
        ({"hold_until": LATE + 5 * MIN}, "hold for 5 min more"),
        ({"gpus": ((0, 80.0, 100.0),)}, "GPU 0 at 80 %"),
        ({"keep_alive": True}, "KEEP_ALIVE_COMMAND exits 0"),
        ({"seeding_until": LATE + MIN}, "seeding runs (extensions, models or a push)"),
        ({"shell_input": (LATE - MIN, "pts/0 (root)")}, "typed in pts/0 (root) 1 min ago"),
        ({"gpus": None, "gpu_error": "Failed to initialize NVML"}, "GPU not read (Failed to initialize NVML)"),
        ({"keep_alive_error": "exit 127: not found"}, "KEEP_ALIVE_COMMAND exit 127: not found"),
    ],
    ids=["grace", "hold", "gpu", "keep-alive", "seeding", "shell", "gpu-unread", "keep-alive-broken"],
)
def test_at_a_first_boot_the_grace_a_hold_the_gpu_a_shell_and_the_keep_alive_command_still_count(kw, named):
    """A clock idle long enough to delete the VM: each of these keeps it (work, or trouble up to its cap) as
    on any VM; the not-installed-yet SwarmUI, data volume and LLM runtime count for nothing."""
    quiet_gpu = {"gpus": ((0, 0.0, 0.0),)}
    decision = decide(seen(**(FIRST_BOOT | quiet_gpu | kw)), ALL_ON, Memory(idle_since=LATE - 40 * MIN))
    assert decision.action == KEEP and named in decision.reason, decision.reason
    assert "SwarmUI not answering" not in decision.reason and "data volume" not in decision.reason


def test_at_a_first_boot_a_data_volume_checked_is_trouble_still():
    """Each part of the first boot's config stands alone: a data_mount given is checked, SwarmUI or not."""
    decision = decide(seen(data_volume="not mounted at /mnt/swarm_data", **FIRST_BOOT), LIMITS, Memory())
    assert decision.reason == "data volume not mounted at /mnt/swarm_data: counted as busy for 60 min more"


def listing(*entries: dict) -> dict:
    """ListBackends' answer: an object keyed by backend id, each BackendAPI.BackendToNet's shape."""
    return {str(n): {"id": n, "enabled": True, "title": "", "features": [], "modcount": 0} | e
            for n, e in enumerate(entries)}  # fmt: skip


def ours(status: str, script: str = "dlbackend/ComfyUI/main.py", **kw) -> dict:
    return {"type": "comfyui_selfstart", "status": status, "settings": {"StartScript": script, "GPU_ID": "0"}} | kw


def test_our_backends_are_the_self_start_comfyuis_of_our_start_script():
    answer = listing(
        ours("running"),
        {"type": "comfyui_api", "status": "errored", "settings": {"Address": "http://10.0.0.9:8188"}},  # a user's
        ours("errored", script="/opt/other/ComfyUI/main.py"),  # a user's own ComfyUI elsewhere
        ours("loading", script=' "/opt/swarmui/dlbackend/ComfyUI/main.py" '),  # SwarmUI trims quotes and spaces
        ours("disabled", enabled=False),  # switched off by the user: not ours to wait for
        ours("IDLE", script="dlbackend\\ComfyUI\\main.py"),
    )
    assert our_backends(answer) == ("running", "loading", "idle")
    assert our_backends({}) == () and our_backends(["x"]) == () and our_backends({"0": "x", "1": {"type": 5}}) == ()
    assert our_backends(listing(ours("running", script="x/main.py")), "x/main.py") == ("running",)


# ------------------------------------------------- issue 14: GPU work, a person in a shell, the user's command
GPU_IDLE = ((0, 0.0, 21000.0),)  # a model loaded, nothing running


def test_a_busy_gpu_is_work_that_restarts_the_clock_and_each_busy_gpu_is_named():
    hot = ((0, 95.0, 30000.0), (1, 11.0, 500.0))
    ticks = [seen(LATE, gpus=GPU_IDLE), seen(LATE + 29 * MIN, gpus=hot), seen(LATE + 30 * MIN, gpus=GPU_IDLE)]
    first, busy, after = run(ticks, limits=ALL_ON)
    assert first.action == KEEP
    assert busy.action == KEEP and busy.reason == "GPU 0 at 95 %, GPU 1 at 11 %" and busy.fires_at is None
    assert after.fires_at == LATE + 60 * MIN  # the clock began again when the GPU went quiet


@pytest.mark.parametrize(
    ("gpus", "said"),
    [
        (GPU_IDLE, "no GPU work"),  # memory in use is no work: ComfyUI keeps its models loaded
        (((0, 10.0, 100.0),), "no GPU work"),  # at the threshold is not above it
        (((0, None, 100.0),), "no GPU work"),  # [N/A]: a MIG slice tells no utilisation of its own
        ((), "no GPU found"),
    ],
)
def test_a_quiet_gpu_lets_the_clock_run_and_the_reason_says_so(gpus, said):
    decisions = run([seen(LATE + m * MIN, gpus=gpus) for m in (0, 30)], limits=ALL_ON)
    assert decisions[0].reason == f"queue empty, {said}, idle for 0 min"
    assert decisions[1].action == DELETE


def test_no_nvidia_smi_at_all_is_named_and_is_no_reason_to_keep_the_vm():
    absent = {"gpu_error": "no nvidia-smi on PATH", "gpu_absent": True}
    decisions = run([seen(LATE + m * MIN, **absent) for m in (0, 30)], limits=ALL_ON)
    assert decisions[0].reason == "queue empty, GPU not read (no nvidia-smi on PATH), idle for 0 min"
    assert decisions[1].action == DELETE


def test_a_gpu_that_cannot_be_read_is_trouble_capped_a_job_may_still_run_on_it():
    # unattended-upgrades replaced NVIDIA's libraries under a running driver: nvidia-smi fails, the job runs on
    broken = {"gpu_error": "nvidia-smi exit 18: Failed to initialize NVML: Driver/library version mismatch"}
    first, at_cap, end = run([seen(LATE + m * MIN, **broken) for m in (0, 60, 90)], limits=ALL_ON)
    said = f"GPU not read ({broken['gpu_error']})"
    assert first.action == KEEP and first.reason == f"{said}: counted as busy for 60 min more"
    assert at_cap.fires_at == LATE + 90 * MIN and end.action == DELETE and end.reason.count("GPU not read") == 1


def test_with_the_gpu_signal_off_a_busy_gpu_is_neither_work_nor_named():
    decision = decide(seen(gpus=((0, 99.0, 1.0),)), LIMITS, Memory(idle_since=LATE - 30 * MIN))
    assert decision.action == DELETE and "GPU" not in decision.reason


def test_a_key_typed_in_a_shell_holds_the_clock_idle_minutes_from_the_key():
    typed = (LATE + 5 * MIN, "pts/0 (root)")
    ticks = [seen(LATE + m * MIN, shell_input=typed) for m in (0, 6, 34, 35)]
    start, after_key, before_end, end = run(ticks)
    assert start.fires_at == LATE + 30 * MIN and "typed" not in start.reason  # the key is still to come
    assert after_key.reason == "queue empty, typed in pts/0 (root) 1 min ago, idle for 1 min"
    assert after_key.fires_at == LATE + 35 * MIN and after_key.memory.idle_since == LATE + 5 * MIN
    assert before_end.action == KEEP and end.action == DELETE


def test_a_terminal_left_open_and_untouched_does_not_keep_the_vm():
    old = (LATE - 60 * MIN, "pts/3 (ubuntu)")
    decisions = run([seen(LATE + m * MIN, shell_input=old) for m in (0, 30)])
    assert "pts" not in decisions[0].reason and decisions[1].action == DELETE


def test_a_key_from_the_future_is_no_key_and_never_holds_the_vm():
    ahead = (LATE + 600 * MIN, "pts/0 (root)")  # the clock stepped back, or a touch on the pts
    decisions = run([seen(LATE + m * MIN, shell_input=ahead) for m in range(0, 200, 10)])
    assert decisions[0].fires_at == LATE + 30 * MIN and "typed" not in decisions[0].reason
    assert decisions[3].action == DELETE


def test_a_key_a_moment_ahead_counts_as_now():
    decision = decide(seen(shell_input=(LATE + 3, "pts/0 (root)")), LIMITS, Memory(idle_since=LATE - 10 * MIN))
    assert decision.fires_at == LATE + 30 * MIN and "typed in pts/0 (root) 0 min ago" in decision.reason


def test_a_person_typing_holds_the_clock_past_the_trouble_cap_too():
    down = {"status": None, "error": "connection refused"}
    typed = (LATE + 70 * MIN, "pts/0 (root)")  # the user fixing SwarmUI by hand, after the cap
    past_cap = Memory(troubled_since=LATE, idle_since=LATE + 60 * MIN)  # the clock runs since the cap
    decision = decide(seen(LATE + 71 * MIN, shell_input=typed, **down), LIMITS, past_cap)
    assert decision.action == KEEP and decision.fires_at == LATE + 100 * MIN, decision
    assert "typed in pts/0 (root) 1 min ago" in decision.reason


def test_the_keep_alive_command_exiting_0_is_work_and_another_code_is_not():
    busy, quiet = run([seen(LATE, keep_alive=True), seen(LATE + MIN, keep_alive=False)])
    assert busy.reason == "KEEP_ALIVE_COMMAND exits 0" and busy.fires_at is None
    assert quiet.reason == "queue empty, idle for 0 min" and quiet.fires_at == LATE + 31 * MIN


def test_a_keep_alive_command_that_cannot_say_is_trouble_named_and_capped_never_silently_idle():
    broken = {"keep_alive_error": "exit 127: sh: 1: pgrep-typo: not found"}
    ticks = [seen(LATE + m * MIN, **broken) for m in (0, 60, 90)]
    first, at_cap, end = run(ticks)
    said = "KEEP_ALIVE_COMMAND exit 127: sh: 1: pgrep-typo: not found"
    assert first.action == KEEP and first.reason == f"{said}: counted as busy for 60 min more"
    assert at_cap.fires_at == LATE + 90 * MIN and end.action == DELETE and said in end.reason


def test_an_install_beside_an_idle_swarmui_is_never_idle_and_the_idle_clock_starts_when_it_ends():
    pip = {"installs": ("installing: pip install sageattention",)}
    ticks = [seen(LATE, **pip), seen(LATE + 5 * MIN, **pip), seen(LATE + 6 * MIN), seen(LATE + 36 * MIN)]
    first, still, ended, end = run(ticks)
    assert (
        first.action == KEEP
        and first.reason == "SwarmUI installing: pip install sageattention: counted as busy for 60 min more"
    )
    assert still.reason.endswith("counted as busy for 55 min more") and still.fires_at is None
    assert ended.reason == "queue empty, idle for 0 min" and ended.memory.troubled_since is None
    assert end.action == DELETE


def test_an_install_during_a_generation_is_named_beside_the_work_and_its_cap_waits():
    decision = decide(seen(status=running(live_gens=1), installs=("installing: git pull",)), LIMITS, Memory())
    assert decision.action == KEEP and decision.reason == "1 live gens; SwarmUI installing: git pull"
    assert decision.memory.troubled_since is None


def test_swarmui_trouble_and_a_broken_keep_alive_command_are_both_named():
    decision = decide(seen(status=None, error="refused", keep_alive_error="ran past its 30 s timeout"), LIMITS,
                      Memory())  # fmt: skip
    assert decision.reason.startswith("SwarmUI not answering (refused); KEEP_ALIVE_COMMAND ran past its 30 s timeout")


# ------------------------------------------------- issue 14: the hour already paid
CLOCK = replace(LIMITS, billing_hour="clock", billing_margin_seconds=3 * MIN)
TOP = 1_800_000.0  # a whole hour of the clock (1_800_000 / 3600 = 500)


def test_clock_billing_keeps_an_idle_vm_to_the_margin_before_the_paid_hour_ends():
    # idle since 13:35: the deadline 14:05 falls in the hour 14:00-15:00, billed whole anyway
    went_idle = TOP - 25 * MIN
    ticks = [seen(went_idle), seen(TOP + 5 * MIN), seen(TOP + 56 * MIN), seen(TOP + 57 * MIN)]
    first, at_deadline, before_margin, at_margin = run(ticks, limits=CLOCK)
    assert first.fires_at == TOP + 57 * MIN and first.reason.endswith("the hour is paid for 85 min more")
    assert first.paid_until == TOP + 60 * MIN  # status says "the hour is paid until 15:00"
    assert at_deadline.action == KEEP and at_deadline.reason == (
        "queue empty, idle for 30 min; the hour is paid for 55 min more"
    )
    assert before_margin.action == KEEP and at_margin.action == DELETE
    assert at_margin.reason == "queue empty, idle for 82 min; the hour is paid for 3 min more: deleting this server"


def test_a_deadline_inside_the_margin_deletes_at_the_deadline():
    went_idle = TOP + 28 * MIN  # deadline 14:58, past 14:57
    first, at_deadline = [decide(seen(t), CLOCK, Memory(idle_since=went_idle)) for t in (went_idle, TOP + 58 * MIN)]
    assert first.fires_at == TOP + 58 * MIN and at_deadline.action == DELETE


def test_a_deadline_on_the_hour_has_begun_the_next_hour():
    went_idle = TOP - 30 * MIN  # deadline exactly 14:00: the hour 14:00-15:00 is billed from its first second
    assert decide(seen(TOP), CLOCK, Memory(idle_since=went_idle)).fires_at == TOP + 57 * MIN


def test_work_in_the_paid_hour_resets_the_clock_as_ever():
    went_idle = TOP - 25 * MIN
    memory = decide(seen(TOP + 10 * MIN), CLOCK, Memory(idle_since=went_idle)).memory
    busy = decide(seen(TOP + 20 * MIN, comfy_queue=1), CLOCK, memory)
    after = decide(seen(TOP + 21 * MIN), CLOCK, busy.memory)
    assert busy.action == KEEP and after.fires_at == TOP + 57 * MIN  # idle from 14:21: 14:51, in the paid hour


def test_rental_billing_counts_whole_hours_from_the_servers_creation():
    made = TOP + 20 * MIN  # hours end at :20
    rental = replace(CLOCK, billing_hour="rental", rental_started_at=made)
    decision = decide(seen(TOP + 50 * MIN), rental, Memory(idle_since=TOP + 40 * MIN))  # deadline 15:10
    assert decision.fires_at == made + 60 * MIN - 3 * MIN  # the hour 14:20-15:20, less the margin
    assert replace(rental, rental_started_at=None).billing_hour == "rental"
    unknown = decide(seen(TOP + 50 * MIN), replace(rental, rental_started_at=None), Memory(idle_since=TOP + 40 * MIN))
    assert unknown.fires_at == TOP + 70 * MIN and "paid" not in unknown.reason  # no creation known: off


def test_billing_off_is_the_plain_deadline():
    decision = decide(seen(TOP + 10 * MIN), LIMITS, Memory(idle_since=TOP + 5 * MIN))
    assert decision.fires_at == TOP + 35 * MIN and "paid" not in decision.reason


def test_a_tick_late_into_the_next_hour_uses_that_hour_too():
    went_idle = TOP - 40 * MIN  # deadline 13:50; the tick that sees it comes at 14:02 (a VM suspended a while)
    late = decide(seen(TOP + 2 * MIN), CLOCK, Memory(idle_since=went_idle))
    assert late.action == KEEP and late.fires_at == TOP + 57 * MIN  # the hour 14:00-15:00 is billed already


# ------------------------------------------------- issue 17: the LLM runtime's own activity
def ollama(*models: tuple[str, float | None]) -> dict:
    return {"llm": LlmLook("ollama", models=models)}


def test_a_model_ollama_keeps_loaded_is_work_and_the_clock_starts_when_it_is_unloaded():
    loaded = ollama(("llama3.2:1b", LATE + 5 * MIN))
    ticks = [seen(LATE, **loaded), seen(LATE + 4 * MIN, **loaded), seen(LATE + 5 * MIN, **ollama())]
    ticks += [seen(LATE + 34 * MIN, **ollama()), seen(LATE + 35 * MIN, **ollama())]
    first, later, unloaded, before_end, end = run(ticks)
    assert first.action == KEEP and first.fires_at is None and first.memory.idle_since is None
    assert first.reason == "LLM runtime: model llama3.2:1b loaded (keep-alive for 5 min more)"
    assert later.reason == "LLM runtime: model llama3.2:1b loaded (keep-alive for 1 min more)"
    assert unloaded.reason == "queue empty, no Ollama model loaded, idle for 0 min"
    assert unloaded.fires_at == LATE + 35 * MIN  # IDLE_MINUTES after the keep-alive ended
    assert before_end.action == KEEP and end.action == DELETE
    assert end.reason == "queue empty, no Ollama model loaded, idle for 30 min: deleting this server"


def test_the_reason_names_a_model_in_use_first_and_counts_the_others():
    # Ollama sets expires_at when a model's last request ends (server/sched.go): one past it is answering now
    answering = ollama(("qwen3:4b", LATE + 3 * MIN), ("llama3.2:1b", LATE - 2 * MIN), ("phi4:14b", None))
    in_use = decide(seen(**answering), LIMITS, Memory())
    assert in_use.reason == "LLM runtime: model llama3.2:1b loaded (in use) and 2 more"
    kept = ollama(("qwen3:4b", LATE + 3 * MIN), ("llama3.2:1b", LATE + 9 * MIN))
    assert decide(seen(**kept), LIMITS, Memory()).reason == (
        "LLM runtime: model llama3.2:1b loaded (keep-alive for 9 min more) and 1 more"
    )
    assert decide(seen(**ollama(("phi4:14b", None))), LIMITS, Memory()).reason == "LLM runtime: model phi4:14b loaded"


FOREVER = ((1 << 63) - 1) / 1e9  # keep_alive -1: math.MaxInt64 ns (Ollama's envconfig.KeepAlive)


def test_a_model_kept_for_ever_is_work_when_a_request_ended_and_idle_from_the_last_one():
    """Upstream moves a for-ever model's end at every request end (sched.go processCompleted), as the audit's
    U1 read: a chat every 4 minutes keeps the VM; after the last request the VM goes IDLE_MINUTES later."""

    def used(minute: float) -> dict:  # the last request ended at this minute
        return ollama(("llama3.2:1b", LATE + minute * MIN + FOREVER))

    chat = [seen(LATE + m * MIN, **used(4 * ((m - 1) // 4) + 0.5)) for m in range(1, 121)]  # one every 4 min
    decisions = run(chat)
    assert all(d.action == KEEP for d in decisions), [d.reason for d in decisions if d.action != KEEP]
    assert decisions[0].reason == "LLM runtime: model llama3.2:1b used (kept loaded for ever, last request " \
        "ended 0 min ago)"  # fmt: skip
    assert decisions[2].reason == "queue empty, Ollama model llama3.2:1b kept loaded for ever, last request " \
        "ended 2 min ago, idle for 1 min"  # fmt: skip
    assert decisions[4].action == KEEP and decisions[4].memory.idle_since is None  # minute 5: the next request
    # the last request ended at minute 116.5; the look at 117 saw it, the clock runs from the look at 118
    quiet = [seen(LATE + m * MIN, **used(116.5)) for m in range(121, 150)]
    after = run(quiet, decisions[-1].memory)
    assert [d.action for d in after].index(DELETE) == 148 - 121
    assert after[148 - 121].reason.endswith("idle for 30 min: deleting this server")
    # one request, then nothing: deleted IDLE_MINUTES on, never kept to the trouble cap
    once = run([seen(LATE + m * MIN, **used(0)) for m in range(1, 33)])
    assert [d.action for d in once].index(DELETE) == 31 and "counted as busy" not in once[31].reason


def test_a_model_kept_for_ever_before_its_first_request_ends_is_in_use():
    """Ollama reports now + the keep-alive until a runner's first request ends (sched.go loadedModels)."""
    ticks = [seen(LATE + m * MIN, **ollama(("qwen3:4b", LATE + m * MIN + FOREVER))) for m in range(0, 40)]
    decisions = run(ticks)
    assert all(d.action == KEEP and d.memory.idle_since is None for d in decisions)
    assert decisions[5].reason == "LLM runtime: model qwen3:4b used (kept loaded for ever, in use)"


def test_a_model_of_a_long_keep_alive_that_did_not_move_is_trouble_capped():
    """A client's long but finite keep-alive (24h): its end does not tell when its last request ended, and a
    request running on it moves nothing until it ends: capped trouble, as before."""
    day = ollama(("llama3.2:1b", LATE + 24 * 60 * MIN))
    first, later = run([seen(LATE, **day), seen(LATE + MIN, **day)])
    assert first.reason == "LLM runtime: model llama3.2:1b loaded (keep-alive for 1440 min more)"
    assert later.reason.startswith("LLM runtime: model llama3.2:1b kept loaded 1439 min more and no request ended")


@pytest.mark.parametrize(
    ("look", "busy", "quiet"),
    [
        (LlmLook("llamacpp", slots=(True, False)), "LLM runtime: 1 of 2 llama.cpp slots processing",
         "no llama.cpp slot processing"),
        (LlmLook("llamacpp", slots=(True,)), "LLM runtime: 1 of 1 llama.cpp slot processing",
         "no llama.cpp slot processing"),
        (LlmLook("llamacpp", requests=2), "LLM runtime: 2 llama.cpp requests processing or deferred",
         "no llama.cpp request"),
        (LlmLook("llamacpp", awake=True), "LLM runtime: llama.cpp model loaded (it sleeps once unused for its "
         "--sleep-idle-seconds)", "llama.cpp model asleep"),
    ],
)  # fmt: skip
def test_a_llamacpp_slot_or_request_at_work_keeps_the_vm_and_a_quiet_one_is_said(look, busy, quiet):
    working = decide(seen(llm=look), LIMITS, Memory(idle_since=LATE - 40 * MIN))
    assert working.action == KEEP and working.reason == busy and working.fires_at is None
    idle = replace(look, slots=tuple(False for _ in look.slots) if look.slots else None, requests=look.requests and 0,
                   awake=False if look.awake else None)  # fmt: skip
    assert decide(seen(llm=idle), LIMITS, Memory()).reason == f"queue empty, {quiet}, idle for 0 min"


@pytest.mark.parametrize(
    ("look", "named"),
    [
        (LlmLook("ollama", error="[Errno 111] Connection refused"), "Ollama not read ([Errno 111] Connection refused)"),
        (LlmLook("llamacpp", error="/slots off (HTTP 501 Not Implemented), /metrics off (HTTP 501 Not Implemented)"),
         "llama.cpp not read (/slots off (HTTP 501 Not Implemented), /metrics off (HTTP 501 Not Implemented))"),
    ],
)  # fmt: skip
def test_a_runtime_not_there_to_ask_is_no_work_and_no_trouble_only_named(look, named):
    # nothing listens (not installed yet, stopped, crashed): it can run nothing; a route switched off tells nothing
    first, end = run([seen(LATE, llm=look), seen(LATE + 30 * MIN, llm=look)])
    assert first.reason == f"queue empty, {named}, idle for 0 min" and first.memory.troubled_since is None
    assert end.action == DELETE  # IDLE_MINUTES, not a minute more


def test_a_runtime_that_runs_but_does_not_tell_is_trouble_capped_never_silently_idle():
    for error in ("timed out", "HTTP 503 Service Unavailable", "not a list of slots with is_processing"):
        look = LlmLook("llamacpp", error=error, silent=True)
        first, at_cap, end = run([seen(LATE + m * MIN, llm=look) for m in (0, 60, 90)])
        assert first.reason == f"LLM runtime: llama.cpp not read ({error}): counted as busy for 60 min more"
        assert at_cap.fires_at == LATE + 90 * MIN and end.action == DELETE
        assert end.reason.count("llama.cpp not read") == 1  # trouble names it, the idle note does not again


def test_llm_work_keeps_the_vm_though_swarmui_does_not_answer_and_says_both():
    down = {"status": None, "error": "connection refused"}
    decision = decide(seen(**down, **ollama(("llama3.2:1b", LATE))), LIMITS, LONG_TROUBLE)
    assert decision.action == KEEP and decision.memory.troubled_since is None
    said = "LLM runtime: model llama3.2:1b loaded (in use); SwarmUI not answering (connection refused)"
    assert decision.reason == said


def test_with_the_llm_signal_off_the_runtime_is_neither_work_nor_named():
    decision = decide(seen(llm=None), LIMITS, Memory(idle_since=LATE - 30 * MIN))
    assert decision.action == DELETE and "LLM" not in decision.reason and "Ollama" not in decision.reason


def test_a_keep_alive_longer_than_idle_minutes_is_work_when_it_moves_else_capped_trouble():
    """A client's keep_alive "24h" must not hold an unused VM for a day, nor let the VM go under a request
    that runs on it (sched.go moves the end only when a request ends): after the request that set it, the
    model's use is unseen, trouble counted as busy up to the cap; a request that ended since (the end moved,
    later or earlier) is work again."""
    day = 24 * 60 * MIN
    asked = ollama(("llama3.2:1b", LATE + day))  # a request just ended, with keep_alive 24h
    again = ollama(("llama3.2:1b", LATE + 20 * MIN + 60 * MIN))  # another, 20 min later, with keep_alive 1h
    first, unused, used, then_unused = run(
        [seen(LATE, **asked), seen(LATE + MIN, **asked), seen(LATE + 20 * MIN, **again),
         seen(LATE + 21 * MIN, **again)]
    )  # fmt: skip
    assert first.action == KEEP and first.reason.startswith("LLM runtime: model llama3.2:1b loaded")
    said = "LLM runtime: model llama3.2:1b kept loaded 1439 min more and no request ended since, its use unseen"
    assert unused.action == KEEP and unused.reason == f"{said}: counted as busy for 60 min more"
    assert used.action == KEEP and used.memory.troubled_since is None  # an earlier end is a move too
    assert then_unused.memory.troubled_since == LATE + 21 * MIN
    # never for the whole keep-alive: the cap, then IDLE_MINUTES
    ticks = run([seen(LATE + m * MIN, **asked) for m in (0, 1, 60, 61, 90, 91)])
    assert [t.action for t in ticks] == [KEEP, KEEP, KEEP, KEEP, KEEP, DELETE]
    assert "no Ollama model loaded" not in ticks[-1].reason and "its use unseen" in ticks[-1].reason


def test_a_failed_look_at_ollama_keeps_the_ends_it_saw():
    """A timeout every other tick must not make each good read look like a new request."""
    day = 24 * 60 * MIN
    asked = ollama(("llama3.2:1b", LATE + day))
    failed = {"llm": LlmLook("ollama", error="timed out", silent=True)}
    ticks = run([seen(LATE, **asked), seen(LATE + MIN, **failed), seen(LATE + 2 * MIN, **asked)])
    assert ticks[1].memory.llm_seen == {"llama3.2:1b": LATE + day}
    assert "its use unseen" in ticks[2].reason


# ------------------------------------------------- issue 38: hung work (SwarmUI #1219)
HUNG = replace(ALL_ON, hung_seconds=60 * MIN)
QUIET_GPU = ((0, 0.0, 20_000.0),)  # a model in VRAM, nothing computing


def test_a_generation_with_every_gpu_quiet_is_hung_after_the_wait_and_goes_idle_minutes_later():
    frozen = {"status": running(live_gens=1), "gpus": QUIET_GPU}
    decisions = run([seen(LATE + m * MIN, **frozen) for m in range(0, 91)], limits=HUNG)
    actions = [d.action for d in decisions]
    assert actions.index(DELETE) == 90  # 60 min hung wait (the cap spent within it), then IDLE_MINUTES
    assert decisions[10].reason == "1 live gens"  # a long quiet step, said nothing of yet
    assert decisions[50].reason == "1 live gens, every GPU quiet for 50 min: hung in 10 min more"
    assert decisions[60].reason == "1 live gens, but every GPU at or below 10 %: hung for 60 min, no GPU work, " \
        "idle for 0 min"  # fmt: skip
    assert decisions[60].fires_at == LATE + 90 * MIN and decisions[60].memory.troubled_since == LATE
    assert decisions[90].reason.endswith("idle for 30 min: deleting this server")


def test_a_gpu_at_work_at_any_tick_resets_the_wait():
    frozen = {"status": running(live_gens=1), "gpus": QUIET_GPU}
    ticks = [seen(LATE + m * MIN, **frozen) for m in range(0, 50)]
    ticks += [seen(LATE + 50 * MIN, status=running(live_gens=1), gpus=((0, 97.0, 20_000.0),))]
    ticks += [seen(LATE + m * MIN, **frozen) for m in range(51, 112)]
    decisions = run(ticks, limits=HUNG)
    assert all(d.action == KEEP and d.memory.idle_since is None for d in decisions[:111])
    assert decisions[-1].memory.hung_since == LATE + 51 * MIN and decisions[-1].reason.startswith("1 live gens, but")


@pytest.mark.parametrize(
    ("signals", "limits"),
    [
        ({"gpus": None, "gpu_error": "Failed to initialize NVML: Driver/library version mismatch"}, HUNG),
        ({"gpus": ((0, None, None),)}, HUNG),  # [N/A]
        ({"gpus": QUIET_GPU}, replace(HUNG, hung_seconds=None)),  # IDLE_HUNG_MINUTES=off
        ({"gpus": QUIET_GPU}, replace(HUNG, gpu_percent=None)),  # IDLE_GPU_PERCENT=off
        ({"gpus": QUIET_GPU, "keep_alive": True}, HUNG),  # the user's own measure says work
        ({"gpus": QUIET_GPU, "downloads": ("Stable-Diffusion/flux.safetensors.tmp",)}, HUNG),  # waits on a download
    ],
    ids=["gpu-unreadable", "gpu-n/a", "hung-off", "gpu-off", "keep-alive", "download"],
)  # fmt: skip
def test_work_is_never_hung_without_a_quiet_gpu_reading_or_with_another_sign_of_work(signals, limits):
    decisions = run([seen(LATE + m * MIN, status=running(waiting_gens=2), **signals) for m in range(0, 200)],
                    limits=limits)  # fmt: skip
    assert all(d.action == KEEP and "hung" not in d.reason for d in decisions)
    if "gpu_error" not in signals and signals["gpus"] != ((0, None, None),):  # unread: the wait paused, not begun
        assert all(d.memory.hung_since is None for d in decisions)


def test_a_gpu_unread_now_and_then_pauses_the_wait_and_never_restarts_it():
    frozen = {"status": running(live_gens=1), "gpus": QUIET_GPU}
    unread = {"status": running(live_gens=1), "gpus": None, "gpu_error": "nvidia-smi timed out"}
    ticks = [seen(LATE + m * MIN, **(unread if m % 7 == 3 else frozen)) for m in range(0, 70)]
    decisions = run(ticks, limits=HUNG)
    assert all(d.memory.hung_since == LATE for d in decisions)
    hung = [m for m, d in enumerate(decisions) if "but every GPU at or below" in d.reason]
    assert hung[0] == 60 and 66 not in hung  # minute 66 is unread: it keeps the VM as work, declares nothing


def test_a_hung_comfyui_queue_counts_too_and_a_quiet_wait_shorter_than_the_cap_spends_the_rest_of_it():
    short = replace(HUNG, hung_seconds=20 * MIN)
    frozen = {"comfy_queue": 1, "gpus": QUIET_GPU}
    decisions = run([seen(LATE + m * MIN, **frozen) for m in range(0, 91)], limits=short)
    assert decisions[10].reason == "1 in the ComfyUI queue, every GPU quiet for 10 min: hung in 10 min more"
    assert decisions[20].reason == "1 in the ComfyUI queue, but every GPU at or below 10 %: hung: counted as busy " \
        "for 40 min more"  # fmt: skip
    assert [d.action for d in decisions].index(DELETE) == 90  # the cap from the GPU going quiet, then idle


def test_an_ollama_load_keeps_the_vm_and_is_named_a_load_not_a_fault():
    """/api/ps waits for a whole load (server/sched.go); the look says so when the rest of Ollama answers."""
    look = LlmLook("ollama", error="GET /api/ps waits for a model load", silent=True, loading=True)
    decision = decide(seen(llm=look), LIMITS, Memory(idle_since=LATE - 40 * MIN))
    assert decision.action == KEEP and decision.reason == "LLM runtime: Ollama loading a model (GET /api/ps waits " \
        "for a model load): counted as busy for 60 min more"  # fmt: skip


def test_a_llamacpp_reload_keeps_the_vm_and_is_named_a_reload():
    """A request woke llama-server: its model reloads holding the queue's lock, and /props waits (server-queue.cpp)."""
    look = LlmLook("llamacpp", error="GET /props waits for the model's reload", silent=True, loading=True)
    decision = decide(seen(llm=look), LIMITS, Memory(idle_since=LATE - 40 * MIN))
    assert decision.action == KEEP and decision.reason.startswith(
        "LLM runtime: llama.cpp loading a model (GET /props waits for the model's reload): counted as busy"
    )
