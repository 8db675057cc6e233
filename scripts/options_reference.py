"""Write docs/options.md, the options reference, from the config dataclasses; --check: exit 1 when it is stale.

The work is transduce.options_reference's (linted and type-checked with the package); this pins the page's path to
this checkout, wherever the command is run from.
"""

import sys
from pathlib import Path

from transduce.options_reference import main

sys.exit(main(default_out=Path(__file__).resolve().parent.parent / "docs" / "options.md"))
