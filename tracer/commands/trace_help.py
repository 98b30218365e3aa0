"""The TRACE argument's help: one text for every command that reads a trace (view, report, events, export)."""

TRACE_HELP = ("a trace dir written by `disttrace run` (several: one per node, merged), a normalized events .jsonl file "
              "(`disttrace events`), PyTorch profiler traces (a *.pt.trace.json[.gz] file, or a directory of them, one "
              "per rank), or a directory of PyTorch Flight Recorder dumps")
