"""`python -m patchkeeper`."""

from .cli import main

if __name__ == "__main__":  # not when a worker process of `--all` imports it (multiprocessing's spawn)
    main()
