"""The commands of `python -m buildscripts`, one module each, every one in the same shape:

    @dataclass(frozen=True, kw_only=True)
    class Options: ...            every option the command takes, typed, with its default
    ABOUT = "..."                 its line in the command list
    def parse(argv, ws, env) -> Options     the argparse parser, and the Namespace turned into Options there
    def run(options) -> int                 the command, from its Options alone

Nothing below this layer sees argparse or a Namespace; cli.py imports each module and handles every error. A
module imports at its top only what its Options and its line need; `parse` and `run` import the library they
drive, so that a start of the CLI loads the one command it runs (tests/process/test_import_cost.py).
"""
