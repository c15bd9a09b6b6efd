"""Serve an OpenStack WSGI application with gunicorn.

Usage: python -m gpu_rent_ground.serve MODULE:ATTR HOST:PORT [oslo args...]

Neutron's and Cinder's WSGI entry points parse sys.argv with oslo.config, so
gunicorn's own command line would break them: sys.argv is replaced by
[prog, *oslo_args] before the application is imported.
"""

import importlib
import sys

from gunicorn.app.base import BaseApplication


class _Application(BaseApplication):
    def __init__(self, target: str, bind: str, argv: list[str]):
        self.target, self.bind, self.argv = target, bind, argv
        super().__init__()

    def load_config(self):
        self.cfg.set("bind", self.bind)
        self.cfg.set("workers", 1)
        self.cfg.set("threads", 4)
        self.cfg.set("worker_class", "gthread")
        self.cfg.set("timeout", 300)
        self.cfg.set("graceful_timeout", 5)
        self.cfg.set("proc_name", self.argv[0])

    def load(self):
        sys.argv = list(self.argv)
        module, attr = self.target.split(":")
        return getattr(importlib.import_module(module), attr)


def main() -> None:
    target, bind, *oslo_args = sys.argv[1:]
    _Application(target, bind, [target.split(":")[0], *oslo_args]).run()


if __name__ == "__main__":
    main()
