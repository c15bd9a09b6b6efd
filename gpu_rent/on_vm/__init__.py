"""Copied to the VM and run there as a package (`python3 -m on_vm.idle_killer`): standard library only.

The laptop imports from it only the portable protocol modules (progress_line, ollama_name, paths), never
what needs fcntl or pwd. tests/unit/test_package_layout.py holds both rules.
"""
