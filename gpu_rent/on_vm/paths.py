"""The paths on the VM that the laptop and the VM both name, written once (design/layout.md rule 8).

Names only, importing nothing: the roles copy it to the VM with the rest of on_vm, and the laptop
imports it (`from gpu_rent.on_vm import paths`) to read or write the same files over SSH. YAML cannot
import, so the roles' defaults repeat some of these; tests/unit/test_vm_paths.py holds every copy to the
value here, and finds a literal of them in any other Python file of gpu_rent/ or roles/*/files/.
"""

# Holds the on_vm package; every program of it runs as `python3 -m on_vm.<module>` with this on PYTHONPATH.
PROGRAM_DIR = "/usr/local/lib/gpu-rent"
# In memory: a new boot empties it, as the grace after a boot starts anew.
RUN_DIR = "/run/gpu-rent"
# The killer's view of the VM and its memory from tick to tick (no secrets); `gpu-rent status` reads it.
STATUS_FILE = f"{RUN_DIR}/idle-killer.json"
# A unix time until which the killer stays silent: seeding, pulling or pushing runs.
SEEDING_LOCK = f"{RUN_DIR}/seeding"
# A restart of SwarmUI a run of its role has yet to make (roles/swarmui waits for the generations running to end
# first): in /run, as a reboot restarts SwarmUI anyway.
SWARMUI_RESTART_DUE = f"{RUN_DIR}/swarmui-restart-due"
# The latest progress line of the running download or pull.
PROGRESS_FILE = f"{RUN_DIR}/progress"
# On the boot volume, which the next VM boots from: outlives the server.
STATE_DIR = "/var/lib/gpu-rent"
# Why the killer deleted its server; the next up tells it once.
LAST_WORDS_FILE = f"{STATE_DIR}/idle-killer-last-words.json"
# The killer's memory (its idle clock) beside them: a VM restored after a preemption, or rebooted, goes on
# from it instead of a new boot's grace.
MEMORY_FILE = f"{STATE_DIR}/idle-killer-memory.json"
# The killer's config with its credential, root only; never under Output or Models.
CONFIG_FILE = "/root/.gpu-rent/idle-killer.json"
# The data volume (roles/data_volume), where SwarmUI's Models and Output live.
DATA_MOUNT = "/mnt/swarm_data"
# `gpu-rent hold` writes a unix time and the server's id here; on the data volume, so a hold outlives a
# reboot, and the id ends it with its server (idle_look.read_hold).
HOLD_FILE = f"{DATA_MOUNT}/.gpu-rent-hold-until"
# The server metadata key under which up hands the killer its credential, and where the VM reads it: the
# metadata service, which answers each VM with its own server's (on_vm/handoff.py).
HANDOFF_KEY = "gpu_rent_killer"
METADATA_URL = "http://169.254.169.254/openstack/latest/meta_data.json"
