# Shared by the ground scripts: paths, logging, starting and stopping by pid.
# shellcheck shell=bash
GROUND_SRC=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
REPO=$(cd "$GROUND_SRC/.." && pwd)
G=${GROUND_DIR:-$REPO/.ground}          # this ground's runtime: state, logs, pids, clouds.yaml
CACHE=${GROUND_CACHE:-/var/cache/gpu-rent-ground}  # survives ground-down: venv, host image
S=$G/state; ETC=$G/etc; LOG=$G/logs; RUN=$G/run
API=127.0.0.1
# The target hosts' podman network; the cloud's external network uses the same
# subnet so that a floating IP is a real address of a real sshd.
EXT_CIDR=${GROUND_EXTERNAL_CIDR:-10.231.7.0/24}
EXT_GW=${EXT_CIDR%.*}.1
PODNET=gpu-rent-ground
# The cloud APIs a VM talks to itself (the idle-killer): Keystone, Nova, and Neutron for its floating IP.
HOST_API_PORTS=5000,8774,9696
# Neutron's metadata proxy port (haproxy's in a router namespace); the hosts' 169.254.169.254:80 lands here
METADATA_PROXY_PORT=9697
COMPUTES="c1 c2"
POOLS="ru-7a ru-7b"
T_START=${T_START:-$(date +%s)}

log() { echo "[ground +$(( $(date +%s) - T_START ))s] $*" >&2; }
die() { log "FAILED: $*"; exit 1; }

lock_hash() { sha256sum "$GROUND_SRC/openstack/requirements.lock" | cut -c1-12; }
OSVENV=$CACHE/osvenv-$(lock_hash)

start_bg() {  # name logfile cmd... : background process, pid in $RUN/name.pid
  local name=$1 logfile=$2; shift 2
  nohup "$@" >>"$logfile" 2>&1 </dev/null &
  echo $! > "$RUN/$name.pid"
}

alive() { kill -0 "$1" 2>/dev/null; }

stop_pids() {  # grace_seconds pid... : TERM, wait, then KILL what is left
  local grace=$1; shift
  local p any
  for p in "$@"; do alive "$p" && kill -TERM "$p" 2>/dev/null; done
  for _ in $(seq 1 $((grace * 10))); do
    any=0
    for p in "$@"; do alive "$p" && any=1; done
    [ $any = 0 ] && return 0
    sleep 0.1
  done
  for p in "$@"; do alive "$p" && { kill -KILL "$p" 2>/dev/null; log "SIGKILL $p"; }; done
  return 0
}

descendants() { local c; for c in $(pgrep -P "$1" 2>/dev/null); do echo "$c"; descendants "$c"; done; }

wait_http() {  # url [seconds]
  local t=${2:-90}
  for _ in $(seq 1 $((t * 4))); do
    curl -s -o /dev/null --max-time 2 "$1" && return 0
    sleep 0.25
  done
  die "timeout waiting for $1"
}
