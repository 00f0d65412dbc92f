"""`python -m wal3_spark.cli`: the `wal3` command."""

import sys

from wal3_spark.cli.main import main

sys.exit(main())
