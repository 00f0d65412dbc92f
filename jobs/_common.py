"""Makes the checkout's `wal3_spark` importable for the spark-submit entry points in this
directory when no environment has it installed (`spark-submit jobs/quickstart.py` in a clone).

The jobs themselves live in the package (`wal3_spark.jobs`), so an installed wal3-spark runs
them too: `python -m wal3_spark.jobs` lists them with the file spark-submit takes.
"""

from __future__ import annotations

import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
try:
    import wal3_spark  # noqa: F401
except ImportError:
    sys.path.insert(0, str(ROOT))
