"""The bytes on storage: one module per object kind, pure values with no I/O.

`layout` names every object of a log (keys, fragment paths, the records that point at fragments
and snapshots, cursors); `manifest` (manifest and snapshots), `fragment` (Parquet fragments),
`garbage` (`gc/GARBAGE`), `setsum`, `chunk_encoding` (setsum items), `uuid7` (fragment names) and
`schema` (a structured log's Arrow schema) are each one object's codec. docs/format.md is the
contract these modules implement.
"""
