"""`python -m service.cli`: the same CLI as the recipe-advisor command, with its exit code."""
from service.cli.app import main

raise SystemExit(main())
