"""Where programs and tool calls a model wrote run: the bubblewrap containment (``containment``), one program run
under resource limits (``program_runner``) and worker processes with a hard time limit (``timed_pool``); used by the
judge, the tools and the data checks."""
