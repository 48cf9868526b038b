"""The ``mmharness`` commands, one module each (``matrix`` holds ``merge`` too, ``listing`` holds
``targets`` and ``checks``): ``add_parser(sub)`` adds the command's subparser and options,
``run(args)`` runs it and answers the exit code. ``mmharness.cli`` builds the parser and the
command table from them; ``options`` is what they share (exit codes, ``UsageError``, option checks).

A command module imports only the standard library and ``options`` at its top: everything else is
imported inside ``run`` and its helpers, so that ``mmharness --help`` never loads torch.
"""
