"""What the slurm provider runs ON a node with the node's python3 (stdlib only), sent as source
through a step's stdin (`argv.BOOTSTRAP`): nothing of servebench is installed on a node.

- the inventory (`servebench/providers/inventory.py`);
- the process, port and /dev/shm tools the ssh provider wrote for its hosts
  (`servebench/providers/node_tools.py`: stop a process tree by PID and start time, find a
  run's marked processes, pick a port, clean /dev/shm). They are the same job on a Slurm node,
  so the file is reused as it is. It is read as a file, not imported: providers do not import
  each other (tests/test_layout.py); tests/test_slurm_provider.py checks that the file is there
  and that MARK_VARIABLE is the name it looks for.
"""

from __future__ import annotations

from pathlib import Path

from servebench.providers import inventory as inventory_module
from servebench.providers import node_tools

INVENTORY = Path(inventory_module.__file__)
NODE_TOOLS = Path(node_tools.__file__)
MARK_VARIABLE = node_tools.MARK_VARIABLE  # <run id>.<sequence> on every process started
