"""The Ollama stand-in's code, where upstream's release keeps what bin/ollama needs at run time: lib/ollama/.

It imitates upstream Ollama at the tag v0.32.15 (commit b7871fc0d1d8); each module names the upstream files it
follows. Python stdlib only: the VM has python3 and nothing else.
"""

# .github/workflows/release.yaml sets version.Version to the tag without its "v"
VERSION = "0.32.15"
UPSTREAM_COMMIT = "b7871fc0d1d82fe109536efa3e0e8e411c766c75"
