"""Glue that turns a single-host OpenStack into the gpu-rent test ground."""
