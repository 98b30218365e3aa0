"""`python -m disttrace` is the `disttrace` command."""
import sys

from disttrace.tracer.cli import main

sys.exit(main())
