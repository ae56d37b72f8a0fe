"""``python -m ft_agents`` = the ``ft-agents`` command."""

import sys

from ft_agents.cli import main

sys.exit(main())
