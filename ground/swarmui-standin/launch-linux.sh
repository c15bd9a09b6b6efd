#!/usr/bin/env bash
# Stand-in for SwarmUI's launch-linux.sh: same arguments, build logic, and the
# exit code 42 that means "restart me".
cd "$(dirname "$0")" || exit 1
# shellcheck source=launchtools/linux-build-logic.sh
source ./launchtools/linux-build-logic.sh
python3 ./src/standin/server.py "$@"
code=$?
if [ "$code" = 42 ]; then
  for arg in "$@"; do [ "$arg" = --forward_restart ] && exit 42; done
  exec ./launch-linux.sh "$@"
fi
exit "$code"
