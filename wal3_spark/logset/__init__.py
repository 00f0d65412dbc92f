"""Log sets: every log under one prefix, the dirty log that says which changed, and their GC.

`logs` lists and opens the logs of a set; `dirty` records and reads which logs changed; `prefix_gc`
collects every log of a set; `info` summarises a set for the CLI.
"""
