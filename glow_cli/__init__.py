"""The ``glow`` command line: ``glow backends``, ``glow run``, ``glow dump``, ... (``glow --help`` lists them).

In: command-line arguments. Out: an exit code (0 ok, 1 error, 2 usage, 3
internal error) and one-line error messages. Each subcommand lives in its own
module (``cmd_<name>.py``) and is listed in the table ``main.COMMANDS``
(``main.register_command`` adds one). See docs/cli.md.
"""
