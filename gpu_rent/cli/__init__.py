"""The Typer app: one module per command group, all registered in app.py. Only `gpu_rent.__main__` imports it."""


def main() -> None:
    """The entry point a venv installed before the CLI became a package still names (gpu_rent.cli:main): its
    `gpu-rent` script must keep working after a `git pull`, or a user could not even stop a rental."""
    from gpu_rent.cli.app import main as run

    run()
