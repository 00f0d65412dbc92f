"""`wal3 branch`, `checkpoint` and `tag`: forking a log at an offset without copying it, making a
fork standalone, and naming an offset for reproducible reads (docs/design/26-branches-and-tags.md)."""

from __future__ import annotations

import argparse

from wal3_spark.cli.arguments import offset_arg, url_arg
from wal3_spark.cli.commands import EXIT_OK, AddCommand, open_log_store
from wal3_spark.cli.output import Output
from wal3_spark.errors import InvalidOption, Wal3Error
from wal3_spark.log.branches import branch as create_branch, delete_branch
from wal3_spark.log.tags import TagStore
from wal3_spark.ops.checkpoint import checkpoint as checkpoint_log


def branch(args: argparse.Namespace, output: Output) -> int:
    if args.delete:
        if args.destination is not None:
            raise Wal3Error("`wal3 branch --delete URL` takes one log: the branch to delete")
        output.report("branch --delete",
                      delete_branch(open_log_store(args.source, args), force=args.force).to_dict())
        return EXIT_OK
    if args.destination is None:
        raise Wal3Error("`wal3 branch SRC DEST [--at OFFSET]` needs the new branch's location DEST")
    report = create_branch(open_log_store(args.source, args), open_log_store(args.destination, args),
                           at=args.at)
    output.report("branch", report.to_dict())
    return EXIT_OK


def checkpoint(args: argparse.Namespace, output: Output) -> int:
    output.report("checkpoint", checkpoint_log(open_log_store(args.url, args)).to_dict())
    return EXIT_OK


def tag(args: argparse.Namespace, output: Output) -> int:
    # `wal3 tag LOG NAME [--at N] [--hold]`, `wal3 tag LOG --list`, `wal3 tag LOG NAME --delete`
    _check_tag_usage(args)
    tags = TagStore(open_log_store(args.url, args))
    if args.list or args.name is None:
        output.report("tag --list", {"url": tags.url, "tags": [t.to_dict() for t in tags.list()]})
    elif args.delete:
        tags.delete(args.name)
        output.report("tag --delete", {"url": tags.url, "name": args.name, "deleted": True})
    else:
        state = tags.create(args.name, at=args.at, hold=args.hold)
        output.report("tag", {"url": tags.url, **state.to_dict()})
    return EXIT_OK


def _check_tag_usage(args: argparse.Namespace) -> None:
    """Refuse (a usage error) a combination that would do something else than asked: `--delete`
    without a NAME listed the tags and exited 0, as if the deletion had happened."""
    given = [option for option, on in (("--at", args.at is not None), ("--hold", args.hold),
                                       ("--delete", args.delete)) if on]
    if args.list and (args.name is not None or given):
        raise InvalidOption(f"--list takes no NAME and no {', '.join(given) or 'other option'}: "
                            f"`wal3 tag {args.url} --list`")
    if args.name is None and given:
        raise InvalidOption(f"{' and '.join(given)} without a tag NAME: give it (`wal3 tag {args.url} "
                            f"NAME {given[0]}{' N' if given[0] == '--at' else ''}`); "
                            f"`wal3 tag {args.url} --list` lists the tags")
    if args.delete and (args.at is not None or args.hold):
        raise InvalidOption("--delete takes neither --at nor --hold (tags never move): "
                            f"`wal3 tag {args.url} {args.name} --delete`")


def register(add: AddCommand) -> None:
    p = add("branch", branch, "fork a log at an offset without copying it (or --delete a branch)",
            json=("branch", "branch --delete"))
    p.add_argument("source", type=url_arg, metavar="SRC")
    p.add_argument("destination", type=url_arg, nargs="?", metavar="DEST")
    p.add_argument("--at", type=offset_arg, help="the branch point: DEST reads SRC's records below "
                   "it and continues from it (default: SRC's tail)")
    p.add_argument("--delete", action="store_true", help="delete the branch SRC and release its pin")
    p.add_argument("--force", action="store_true", help="with --delete: even while branches read through it")

    p = add("checkpoint", checkpoint, "copy the parent's records a branch reads into it and release "
            "its pin: the branch becomes an ordinary log", json=("checkpoint",))
    p.add_argument("url", type=url_arg)

    p = add("tag", tag, "name an offset of a log (reads of the tag return the same records every "
            "time); list or delete tags", json=("tag", "tag --list", "tag --delete"))
    p.add_argument("url", type=url_arg, metavar="LOG")
    p.add_argument("name", nargs="?", metavar="NAME")
    p.add_argument("--at", type=offset_arg, help="the tag's offset: it names the records below it "
                   "(default: the tail)")
    p.add_argument("--hold", action="store_true",
                   help="keep the tag's records from garbage collection while the tag exists")
    p.add_argument("--list", action="store_true", help="list the log's tags")
    p.add_argument("--delete", action="store_true", help="delete the tag NAME")
