#!/usr/bin/env bash
# Stand-in for upstream launchtools/comfy-install-linux.sh (SwarmUI 062407c7), line for line but for
# the network, which the test ground lacks:
# - "git clone https://github.com/comfyanonymous/ComfyUI" copies the ComfyUI stand-in
#   (src/standin/comfyui.py of this repository) to dlbackend/ComfyUI/main.py, and fails as git clone
#   does when dlbackend/ComfyUI exists and is not empty (then, as upstream, the script goes on: it has
#   no `set -e`, and mends nothing in that folder);
# - the venv is a REAL one, made as upstream makes it (first of python3.11, python3.12, python3.10, ...;
#   ensurepip works offline from the interpreter's bundled wheels);
# - the pip installs (torch, requirements.txt) are not run: they need the network. The venv therefore
#   has no torch, as an upstream install whose pip failed; like upstream, the script still ends with
#   "Installation completed" and exit code 0.
# Run from the SwarmUI folder, as upstream's installer runs it.

STANDIN_COMFYUI="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)/src/standin/comfyui.py"
standin_git_clone_comfyui() {  # what "git clone https://github.com/comfyanonymous/ComfyUI" leaves
    if [ -d ComfyUI ] && [ -n "$(ls -A ComfyUI)" ]; then
        >&2 echo "fatal: destination path 'ComfyUI' already exists and is not an empty directory."
        return 128
    fi
    >&2 echo "Cloning into 'ComfyUI'..."
    if [ ! -f "$STANDIN_COMFYUI" ]; then
        >&2 echo "fatal: repository 'https://github.com/comfyanonymous/ComfyUI/' not found (stand-in: no $STANDIN_COMFYUI)"
        return 128
    fi
    mkdir -p ComfyUI/custom_nodes ComfyUI/models/checkpoints ComfyUI/input ComfyUI/output &&
        cp "$STANDIN_COMFYUI" ComfyUI/main.py &&
        echo "# ComfyUI's requirements; the stand-in installs none (no network on the test ground)" > ComfyUI/requirements.txt
}

# Check if GPU type is provided
if [ $# -eq 0 ]; then
    >&2 echo "Error: GPU type not specified. Please use 'amd' or 'nv' as an argument."
    exit 1
fi

GPU_TYPE=$1

# Validate GPU type
if [ "$GPU_TYPE" != "amd" ] && [ "$GPU_TYPE" != "nv" ]; then
    >&2 echo "Error: Invalid GPU type. Please use 'amd' or 'nv'."
    exit 1
fi

mkdir dlbackend

cd dlbackend

# upstream: git clone https://github.com/comfyanonymous/ComfyUI
standin_git_clone_comfyui

cd ComfyUI

# Try to find a good python executable, and dodge unsupported python versions
for pyvers in python3.11 python3.12 python3.10 python3 python
do
    python=`which $pyvers`
    if [ "$python" != "" ]; then
        break
    fi
done
if [ "$python" == "" ]; then
    >&2 echo "ERROR: cannot find python3"
    >&2 echo "Please follow the install instructions in the readme!"
    exit 1
fi

# Make and activate the venv. "python3" in the venv is now the python executable.
if [ -z "${SWARM_NO_VENV}" ]; then
    # Validate venv
    venv=`$python -m venv 2>&1`
    case $venv in
        *usage*)
            :
        ;;
        *)
            >&2 echo "ERROR: python venv is not installed"
            >&2 echo "Please follow the install instructions in the readme!"
            >&2 echo "If on Ubuntu/Debian, you may need: sudo apt install python3-venv"
            exit 1
        ;;
    esac

    echo "Making venv..."
    $python -s -m venv venv
    source venv/bin/activate
    python=python3
    python3 -m ensurepip --upgrade
else
    echo "swarm_no_venv set, will not create venv"
fi

# Install PyTorch based on GPU type
if [ "$GPU_TYPE" == "nv" ]; then
    echo "install nvidia torch..."
    # upstream: $python -s -m pip install torch torchvision torchaudio --index-url https://download.pytorch.org/whl/cu130 --no-cache-dir
    echo "stand-in: torch is not installed (no network on the test ground)"
elif [ "$GPU_TYPE" == "amd" ]; then
    echo "install amd torch..."
    # upstream: $python -s -m pip install --pre torch torchvision torchaudio --index-url https://download.pytorch.org/whl/nightly/rocm7.1 --no-cache-dir
    echo "stand-in: torch is not installed (no network on the test ground)"
fi

echo "install general requirements..."
# upstream: $python -s -m pip install -r requirements.txt
echo "stand-in: requirements.txt is not installed (no network on the test ground)"

echo "Installation completed for $GPU_TYPE GPU."
