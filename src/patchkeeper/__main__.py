"""`python -m patchkeeper`."""

from .cli import main

main()
