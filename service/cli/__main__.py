"""`python -m service.cli`: the same CLI as the recipe-advisor command, with its exit status."""
import sys

from service.cli.app import main

sys.exit(main())
