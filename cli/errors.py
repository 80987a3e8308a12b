"""The one error of the command line: what the user asked for cannot be done as asked."""


class UsageError(Exception):
    """A problem with what the user asked for; printed in one line without a traceback, exit 2."""
