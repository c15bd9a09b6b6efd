#!/usr/bin/env bash
# Stop or start one API of the running ground, as an outage would: ground/service.sh stop|start NAME
# (NAME as in .ground/run/NAME.pid, e.g. nova-api, neutron-api, keystone). start waits until it answers.
set -euo pipefail
. "$(dirname "$0")/lib.sh"
action=${1:?stop or start}; name=${2:?a service name, e.g. nova-api}
[ -f "$RUN/$name.start" ] || die "no $RUN/$name.start: $name is not an API this ground started"
case $action in
  stop)
    [ -f "$RUN/$name.pid" ] && stop_pids 10 "$(cat "$RUN/$name.pid")"
    log "$name stopped" ;;
  start)
    start_bg "$name" "$LOG/$name.out" bash "$RUN/$name.start"
    port=$(grep -oE "$API:[0-9]+" "$RUN/$name.start" | head -1)
    wait_http "http://$port/" 120
    log "$name answers again" ;;
  *) die "usage: ground/service.sh stop|start NAME" ;;
esac
