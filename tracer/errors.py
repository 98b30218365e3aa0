"""TraceError: bad input said in one line (the CLI prints it and exits 2). A module of its own so that the
launcher, which must start the job at once, imports nothing else to raise it."""


class TraceError(Exception):
    """A trace that cannot be read; the message is one line meant for the user."""
