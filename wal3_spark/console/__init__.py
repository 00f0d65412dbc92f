"""`wal3 console`: read-only web pages for one log or the logs under a prefix (docs/console.md).

The parts: `target` (what the console looks at, opened read-only), `figures` (what each page
shows, computed from the core's modules), `charts` (the SVG geometry of the charts, pure),
`verify_runs` (verifications running in the background with their progress), `app` (the Flask
application: routes and templates) and `server` (the threaded HTTP server `wal3 console`
runs).

Design: docs/design/60-console.md.
"""
