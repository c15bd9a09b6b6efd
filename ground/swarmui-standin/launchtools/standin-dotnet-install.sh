#!/usr/bin/env bash
# Stand-in for Microsoft's dotnet-install.sh (https://dot.net/v1/dotnet-install.sh), which upstream
# launchtools/linux-dotnet-install.sh downloads; the test ground has no network, so that script copies
# this one instead. Same options as the real one uses them: --channel 10.0|8.0 [--runtime aspnetcore]
# --install-dir DIR. Same layout: DIR/dotnet (here the stand-in CLI, launchtools/standin-dotnet.py),
# DIR/sdk/<version>, DIR/shared/Microsoft.NETCore.App/<version>, DIR/shared/Microsoft.AspNetCore.App/<version>.
set -euo pipefail
channel="" runtime="" dir="$HOME/.dotnet"
while [ $# -gt 0 ]; do
  case $1 in
    --channel) channel=$2; shift ;;
    --runtime) runtime=$2; shift ;;
    --install-dir) dir=$2; shift ;;
    *) echo "dotnet-install: Unknown argument \`$1\`" >&2; exit 1 ;;
  esac
  shift
done
# The stand-in's versions of each channel (any version of the channel would do)
case $channel in
  10.0) sdk=10.0.100 rt=10.0.0 ;;
  8.0) sdk=8.0.416 rt=8.0.22 ;;
  *) echo "dotnet-install: the stand-in knows channels 10.0 and 8.0, not '$channel'" >&2; exit 1 ;;
esac
echo "dotnet-install: Attempting to download using primary link (stand-in: copied, no network)"
mkdir -p "$dir/shared/Microsoft.NETCore.App/$rt" "$dir/host/fxr/$rt"
case $runtime in
  aspnetcore) mkdir -p "$dir/shared/Microsoft.AspNetCore.App/$rt" ;;
  "") mkdir -p "$dir/sdk/$sdk" "$dir/shared/Microsoft.AspNetCore.App/$rt" ;;
  *) echo "dotnet-install: the stand-in knows --runtime aspnetcore only" >&2; exit 1 ;;
esac
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
install -m 0755 "$here/standin-dotnet.py" "$dir/dotnet"
if [ -n "$runtime" ]; then version=$rt; else version=$sdk; fi
echo "dotnet-install: Installed version is $version"
echo "dotnet-install: Installation finished successfully."
