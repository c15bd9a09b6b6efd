"""gpu-rent: a preemptible OpenStack GPU VM for SwarmUI that deletes itself when idle."""

__version__ = "0.1.0"
