"""The commands of `sglang-images` (`python -m buildscripts COMMAND`): one module each, of one shape:

    Options   a frozen, keyword-only dataclass of every option, typed, its defaults in one place
    ABOUT     one line for the command list
    parse(argv, ws, env) -> Options
    run(options) -> int

`cli.py` dispatches to them; a command is a thin shell over the library rooms below it, which know nothing of
its command line.
"""
