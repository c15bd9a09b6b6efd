"""Rent, stop and destroy through the playbooks, and what `status` says about the rental."""
