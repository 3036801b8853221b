"""`python -m tfop`: the same as the `tfop` command."""
from tfop.tools.cli import main

main()
