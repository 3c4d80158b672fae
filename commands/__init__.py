"""The admin's commands (`workload-resizer plan|report|restore|calibrate|selftest`), also a kubectl plugin."""

from commands.cli import COMMANDS, main

__all__ = ["COMMANDS", "main"]
