"""One log's I/O over an `ObjectStore`: the protocol that reads and changes the objects in `format`.

`cas` is the one compare-and-swap primitive; `committer` (and `chain`, pipelined commits) publish
fragments; `writer` appends; `reader` and `scan` read; `cursors` and `cursor_lag` track consumers.
"""
