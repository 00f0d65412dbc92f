"""`wal3`: operate a log from the command line.

    wal3 init URL [--schema "id: int64, name: string"] [--json]
    wal3 info URL [--json]                     (a log, or the log set under a prefix)
    wal3 ls PREFIX [--logs A,B | --pattern GLOB] [--json]
    wal3 tail URL [-n N]
    wal3 cat URL [--from OFFSET] [--to OFFSET]
    wal3 verify URL [--json] [--no-data]
    wal3 cursor list|get|set|delete URL [NAME [OFFSET]] [--json]
    wal3 gc URL [--dry-run] [--grace SECONDS] [--keep-from OFFSET] [--force] [--json]
    wal3 seal URL [--json]
    wal3 retention URL (--max-age DURATION | --max-bytes SIZE | --clear) [--json]
    wal3 copy SOURCE DESTINATION [--from OFFSET] [--no-cursors] [--json]
    wal3 console URL_OR_PREFIX [--host 127.0.0.1] [--port 8340]   (docs/console.md)
    wal3 exporter URL_OR_PREFIX [--host 127.0.0.1] [--port 9340] [--ttl SECONDS]   (Prometheus)
    wal3 stress [URL] ... [--json]             (docs/stress.md)
    wal3 --version

URLs: `s3://bucket/prefix`, `file:///path` or a plain path, `memory://name` (useless here). S3
settings come from `--endpoint`/`--region` or the usual AWS_* environment variables.

The parts: `arguments` (argument types, shared with the spark-submit jobs), `output` (every
report as text or, with `--json`, as JSON: chosen once, here; records are always JSON lines),
`commands` (one function per command, a module per group) and this module, which builds the
parser and runs a command. Each command's `--help` documents its `--json` output.

Long commands (verify, gc, copy, cat) draw a progress bar on stderr only when it is a terminal
(`cat` only when its records do not go to the terminal): see `wal3_spark.cli.progress`.

Exit status: 0 on success; 1 when the operation failed for an expected reason (the message goes
to stderr, never a traceback) or when `verify` finds a problem; 2 for usage errors: every
argument is checked (offsets are integers within [1, 2**64 - 1], counts bounded, durations
finite, >= 0 and at most 100 years, shares within [0, 1], URLs of a supported store, offsets
within the log's range) and a bad one is named with the values it may take.
"""

from __future__ import annotations

import argparse
import contextlib
import logging
import sys
import textwrap
from collections.abc import Sequence
from typing import Any

from wal3_spark.cli.arguments import endpoint_arg
from wal3_spark.cli.commands import (
    EXIT_FAIL,
    EXIT_OK,
    EXIT_USAGE,
    Command,
    console,
    cursor,
    exporter,
    lineage,
    log,
    logset,
    ops,
    store_options,
)
from wal3_spark.cli.output import JsonOutput, Output, TextOutput, json_help
from wal3_spark.errors import InvalidLogName, InvalidOption, InvalidUrl, Wal3Error
from wal3_spark.stress import command as stress_command


class _Version(argparse.Action):
    """`--version`: the package's version, looked up only when asked for (reading the
    installed distribution's metadata costs every other command start-up time)."""

    def __init__(self, option_strings: Sequence[str], dest: str = argparse.SUPPRESS, **kwargs: Any) -> None:
        super().__init__(option_strings, dest, nargs=0, default=argparse.SUPPRESS, **kwargs)

    def __call__(self, parser: argparse.ArgumentParser, namespace: argparse.Namespace, values: Any,
                 option_string: str | None = None) -> None:
        from wal3_spark import __version__

        sys.stdout.write(f"wal3 {__version__}\n")
        parser.exit()


def _stress(args: argparse.Namespace, output: Output) -> int:
    if args.json:  # stdout holds the summary alone; the tables go to stderr as the run goes
        return stress_command.main(args, sys.stderr, store_options(args),
                                   report=lambda summary: output.report("stress", summary))
    return stress_command.main(args, output.out, store_options(args))


def build_parser() -> argparse.ArgumentParser:
    def common_options(default: Any) -> argparse.ArgumentParser:
        # Accepted before and after the command; a subcommand's unset option must not
        # overwrite the value given before it, hence SUPPRESS there.
        common = argparse.ArgumentParser(add_help=False)
        common.add_argument("--endpoint", type=endpoint_arg, default=default,
                            help="S3 endpoint URL (default: AWS_ENDPOINT_URL_S3 / AWS_ENDPOINT_URL)")
        common.add_argument("--region", default=default, help="S3 region (default: AWS_REGION)")
        common.add_argument("-v", "--verbose", action="store_true", default=default or False,
                            help="log progress to stderr")
        return common

    parser = argparse.ArgumentParser(
        prog="wal3", description="Operate a wal3 log on object storage.", parents=[common_options(None)]
    )
    parser.add_argument("--version", action=_Version, help="print the version of wal3-spark and exit")
    common = common_options(argparse.SUPPRESS)
    json_option = argparse.ArgumentParser(add_help=False)
    json_option.add_argument("--json", action="store_true",
                             help="print the report as JSON (its shape: below)")
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")

    def add(name: str, fn: Command, help_: str, *, json: tuple[str, ...] = ()) -> argparse.ArgumentParser:
        p = sub.add_parser(name, help=help_, description=textwrap.fill(help_, 92),
                           parents=[common, json_option] if json else [common],
                           epilog=json_help(*json) if json else None,
                           formatter_class=argparse.RawDescriptionHelpFormatter)
        p.set_defaults(fn=fn)
        return p

    for group in (log, logset, ops, cursor, console, exporter, lineage):
        group.register(add)
    stress_command.add_arguments(add("stress", _stress, "run the end-to-end verification stress test",
                                     json=("stress", "stress --logs", "stress --branches")))
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    if args.verbose:
        logging.basicConfig(level=logging.INFO, stream=sys.stderr, format="%(levelname)s %(name)s: %(message)s")
    output = JsonOutput(sys.stdout) if getattr(args, "json", False) else TextOutput(sys.stdout)
    try:
        return args.fn(args, output)
    except (InvalidOption, InvalidUrl, InvalidLogName) as exc:  # arguments only the store or the log can judge
        sys.stderr.write(f"wal3 {args.command}: error: {exc}\n")
        output.failed(args.command, exc)
        return EXIT_USAGE
    except Wal3Error as exc:
        sys.stderr.write(f"wal3 {args.command}: error: {exc}\n")
        output.failed(args.command, exc)
        return EXIT_FAIL
    except BrokenPipeError:  # `wal3 cat ... | head`
        with contextlib.suppress(OSError):
            sys.stdout.close()
        return EXIT_OK
    except KeyboardInterrupt:
        sys.stderr.write("interrupted\n")
        return 130


if __name__ == "__main__":
    sys.exit(main())
