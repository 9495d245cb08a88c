"""`python -m server.cli`: the `refindery` command."""
import sys

from server.cli import main

sys.exit(main())
