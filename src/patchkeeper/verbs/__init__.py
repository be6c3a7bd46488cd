"""The verbs of the command line, one module each (click's options and arguments, and the call of
the verb's command in commands/): cli.py's VERBS imports a verb's module only when that verb runs."""
