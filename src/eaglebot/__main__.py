"""`python -m eaglebot`: the `eagle` command."""
import sys

from eaglebot.frontends.cli.main import main

sys.exit(main())
