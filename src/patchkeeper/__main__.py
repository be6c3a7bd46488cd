"""`python -m patchkeeper` and the `patchkeeper` command: the CLI, and Ctrl-C while it starts (before a
verb runs, which reports its own) as one line and exit 130, not a traceback of the imports."""

import sys

EXIT_INTERRUPTED = 130  # as errors.EXIT_INTERRUPTED, which this module cannot import before Ctrl-C is caught


def run() -> None:
    try:
        from .cli import main  # lazy: Ctrl-C during these imports is caught here
    except KeyboardInterrupt:
        sys.stderr.write("\npatchkeeper: interrupted (Ctrl-C) while starting; nothing was changed\n")
        sys.exit(EXIT_INTERRUPTED)
    try:
        main()
    except KeyboardInterrupt:  # before or after the verb's own handling (click's parsing)
        sys.stderr.write("\npatchkeeper: interrupted (Ctrl-C)\n")
        sys.exit(EXIT_INTERRUPTED)


if __name__ == "__main__":  # not when a worker process of `--all` imports it (multiprocessing's spawn)
    run()
