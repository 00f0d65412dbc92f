"""Fair shares of a trigger among a log set's logs, without Spark: records water-filled so
cold logs are served before the hot one takes the rest, fragment and byte budgets rotated."""

from __future__ import annotations

from wal3_spark.spark.fair_share import Chunk, Limits, Rotation, admit, water_fill


def test_00_water_fill_gives_cold_logs_their_records_before_the_hot_one_takes_the_rest():
    available = {"hot": 10_000, **{f"cold{i}": 10 for i in range(10)}, "warm": 40}
    share = water_fill(available, 150, sorted(available))
    assert sum(share.values()) == 150
    assert all(share[f"cold{i}"] == 10 for i in range(10)) and share["warm"] == 25
    assert share["hot"] == 25
    # fewer records than logs: one each to the least recently served
    assert water_fill({"a": 5, "b": 5, "c": 5}, 2, ["c", "a", "b"]) == {"a": 1, "b": 0, "c": 1}


def chunks_of(fragments: dict[str, list[tuple[int, int, int]]]):
    def chunks(name: str, begin: int, end: int):
        for start, limit, size in fragments[name]:
            if limit > begin and start < end:
                yield Chunk(max(start, begin), min(limit, end), size)
    return chunks


def test_01_fragment_budget_rotates_so_that_every_log_is_served():
    """Ten logs with one fragment each and room for three fragments a batch: within four
    batches every log was served, none twice before all were served once."""
    fragments = {f"log{i}": [(1, 11, 100)] for i in range(10)}
    begins = {name: 1 for name in fragments}
    tails = {name: 11 for name in fragments}
    rotation = Rotation()
    served_order = []
    for _ in range(4):
        ends = admit(begins, tails, chunks_of(fragments), Limits(max_fragments=3), rotation)
        served = sorted(n for n in ends if ends[n] > begins[n])
        served_order.append(served)
        begins = ends
    assert [len(s) for s in served_order] == [3, 3, 3, 1]
    assert sorted(sum(served_order, [])) == sorted(fragments)


def test_02_byte_budget_admits_at_least_one_fragment_and_shares_the_rest():
    fragments = {"hot": [(1, 101, 1000), (101, 201, 1000), (201, 301, 1000)],
                 "cold": [(1, 3, 10)]}
    begins, tails = {"hot": 1, "cold": 1}, {"hot": 301, "cold": 3}
    ends = admit(begins, tails, chunks_of(fragments), Limits(max_bytes=1), Rotation())
    assert sum(1 for n in ends if ends[n] > begins[n]) == 1  # one fragment, however large
    ends = admit(begins, tails, chunks_of(fragments), Limits(max_bytes=2010), Rotation())
    assert ends == {"hot": 201, "cold": 3}
    capped = admit(begins, tails, chunks_of(fragments),
                   Limits(max_records=50, max_bytes=10_000), Rotation())
    assert capped == {"hot": 49, "cold": 3}  # records cap each log, then bytes
