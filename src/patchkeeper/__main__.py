"""`python -m patchkeeper`."""

from .launch import main

main()
