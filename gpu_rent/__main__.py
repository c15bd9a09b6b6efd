"""`python -m gpu_rent`: the same CLI (how `up` starts the background tunnel on every platform)."""

from gpu_rent.cli.app import main

main()
