#!/usr/bin/env bash
# Stand-in for SwarmUI's install-linux.sh (clone, dotnet, launch). The role
# does not use it: it clones and installs headless itself.
echo "install-linux.sh is not used on the test ground; clone the repository instead" >&2
exit 1
