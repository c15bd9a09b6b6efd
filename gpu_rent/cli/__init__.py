"""The Typer app: one module per command group, all registered in app.py. Only `gpu_rent.__main__` imports it."""
