"""The laptop's ways to the VM over SSH: the tunnel, file sync, a shell, the killer's status file."""
