"""Make ``python -m pytest agent/tests`` work from the repo root as well as from agent/.

agent/ goes on sys.path (for the ``tunnel_agent`` package) and so does this directory
(for ``agent_helpers``). Tests drive asyncio themselves (``asyncio.run``), so no pytest
plugin or asyncio mode is configured. Test modules are named ``test_agent_*`` so they
never clash with test modules of the same name elsewhere in the repo.
"""

import sys
from pathlib import Path

_HERE = Path(__file__).resolve().parent
for _path in (_HERE.parent, _HERE):
    if str(_path) not in sys.path:
        sys.path.insert(0, str(_path))
