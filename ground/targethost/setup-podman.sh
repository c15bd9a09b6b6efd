#!/usr/bin/env bash
# Podman settings this kind of machine needs (root, no systemd, cgroup v1/v2 hybrid,
# no CAP_SYS_RESOURCE): runc instead of crun, and ulimits within the hard limits.
set -euo pipefail
nofile=$(ulimit -Hn)
nproc=$(ulimit -Hu); [ "$nproc" = unlimited ] && nproc=32768
[ "$nproc" -gt 32768 ] && nproc=32768   # conmon itself runs with 32768
mkdir -p /etc/containers
want="[containers]
default_ulimits = [\"nofile=${nofile}:${nofile}\", \"nproc=${nproc}:${nproc}\"]
[engine]
runtime = \"runc\""
if [ "$(cat /etc/containers/containers.conf 2>/dev/null)" != "$want" ]; then
  printf '%s\n' "$want" > /etc/containers/containers.conf
fi
