"""Serve an OpenStack WSGI application with gunicorn.

Usage: python -m gpu_rent_ground.serve MODULE:ATTR HOST:PORT [oslo args...]

Neutron's and Cinder's WSGI entry points parse sys.argv with oslo.config, so
gunicorn's own command line would break them: sys.argv is replaced by
[prog, *oslo_args] before the application is imported.
"""

import importlib
import os
import sys

from gunicorn.app.base import BaseApplication


class _Application(BaseApplication):
    def __init__(self, target: str, bind: str, argv: list[str]):
        self.target, self.bind, self.argv = target, bind, argv
        super().__init__()

    def load_config(self):
        self.cfg.set("bind", self.bind)
        # GROUND_SERVE_THREADS=1 for Keystone: its request-local cache (keystone/common/cache/
        # _context_cache.py) lives on oslo.context's current context, and under gthread a token could be
        # validated with another request's roles (a member's credential asked for `admin`: 35 of 60
        # concurrent creations refused with RoleAssignmentNotFound). Processes share no context.
        workers, threads = (
            int(os.environ.get("GROUND_SERVE_WORKERS", "1")),
            int(os.environ.get("GROUND_SERVE_THREADS", "4")),
        )
        self.cfg.set("workers", workers)
        self.cfg.set("threads", threads)
        self.cfg.set("worker_class", "gthread" if threads > 1 else "sync")
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
