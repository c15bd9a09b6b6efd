#!/usr/bin/env bash
# Stand-in for upstream launchtools/linux-dotnet-install.sh (SwarmUI 062407c7), line for line but for
# the download: the test ground has no network, so "wget https://dot.net/v1/dotnet-install.sh" is a
# copy of launchtools/standin-dotnet-install.sh, which installs the stand-in dotnet CLI
# (launchtools/standin-dotnet.py) as "$INSTALL_DIR/dotnet" in the real install's layout.

# First arg is the target install dir, only "$HOME/.dotnet" and "$PWD/.dotnet" are fully supported by Swarm autodetect for launching
INSTALL_DIR="${1:-$HOME/.dotnet}"

# install dotnet
cd launchtools
rm dotnet-install.sh
# https://learn.microsoft.com/en-us/dotnet/core/install/linux-scripted-manual#scripted-install
# upstream: wget https://dot.net/v1/dotnet-install.sh -O dotnet-install.sh
cp standin-dotnet-install.sh dotnet-install.sh
chmod +x dotnet-install.sh
cd ..

./launchtools/dotnet-install.sh --channel 10.0 --runtime aspnetcore --install-dir "$INSTALL_DIR"
./launchtools/dotnet-install.sh --channel 10.0 --install-dir "$INSTALL_DIR"
./launchtools/dotnet-install.sh --channel 8.0 --runtime aspnetcore --install-dir "$INSTALL_DIR"
./launchtools/dotnet-install.sh --channel 8.0 --install-dir "$INSTALL_DIR"

rm ./launchtools/dotnet-install.sh
