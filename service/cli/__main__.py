"""`python -m service.cli`: the same CLI as the recipe-advisor command."""
from service.cli.app import main

main()
