"""The setsum against the vectors of the Rust crate `setsum` 0.7 and Chroma's wal3, plus the
algebra the commit protocol relies on (executors sum, the driver only adds)."""

from __future__ import annotations

import itertools
import json
import pickle

import pytest
from hypothesis import given
from hypothesis import strategies as st

from tests.support.fakes import data_file
from wal3_spark.format.setsum import PRIMES, Setsum

VECTORS = json.loads(data_file("setsum_vectors.json").read_text())
SEVEN = [s.encode() for s in VECTORS["seven_values"]["items_utf8"]]


def test_00_primes_match_vectors():
    assert list(PRIMES) == VECTORS["primes"]


def test_01_empty_hexdigest():
    assert Setsum().hexdigest() == VECTORS["empty_hexdigest"]
    assert not Setsum()


@pytest.mark.parametrize("order", [0, 1, 2, 3, 4])
def test_02_seven_values_in_any_order(order):
    perms = itertools.permutations(SEVEN)
    items = next(itertools.islice(perms, order * 997, None))
    acc = Setsum()
    for item in items:
        acc = acc.insert(item)
    assert acc.hexdigest() == VECTORS["seven_values"]["hexdigest"]
    assert Setsum.of(*items).hexdigest() == VECTORS["seven_values"]["hexdigest"]


def test_03_seven_values_reversed():
    assert Setsum.of(*reversed(SEVEN)).hexdigest() == VECTORS["seven_values"]["hexdigest"]


def test_04_removing_all_seven_gives_empty():
    acc = Setsum.from_hexdigest(VECTORS["seven_values"]["hexdigest"])
    for item in SEVEN[3:] + SEVEN[:3]:
        acc = acc.remove(item)
    assert acc == Setsum()
    assert acc.hexdigest() == VECTORS["empty_hexdigest"]


def test_05_empty_item_lanes():
    vector = VECTORS["empty_item_lanes"]
    assert list(Setsum.of(bytes.fromhex(vector["item_hex"])).lanes) == vector["lanes_u32"]


def test_06_add_state_exactly_primes():
    vector = VECTORS["add_state_exactly_primes"]
    assert list((Setsum(vector["lhs"]) + Setsum(vector["rhs"])).lanes) == vector["sum"]


def test_07_invert_state_desc():
    vector = VECTORS["invert_state_desc"]
    assert list((Setsum() - Setsum(vector["state"])).lanes) == vector["inverted"]


def test_08_add_hex():
    vector = VECTORS["add_hex"]
    total = Setsum.from_hexdigest(vector["a"]) + Setsum.from_hexdigest(vector["b"])
    assert total.hexdigest() == vector["sum"]


@pytest.mark.parametrize(
    "hexdigest",
    [
        VECTORS["seven_values"]["hexdigest"],
        VECTORS["add_hex"]["a"],
        VECTORS["add_hex"]["sum"],
        VECTORS["empty_hexdigest"],
    ],
)
def test_09_hexdigest_round_trip(hexdigest):
    value = Setsum.from_hexdigest(hexdigest)
    assert value.hexdigest() == hexdigest
    assert Setsum.from_hexdigest(value.hexdigest()) == value
    assert pickle.loads(pickle.dumps(value)) == value


@pytest.mark.parametrize(
    "text",
    [
        "",
        "00",
        "0" * 63,
        "0" * 65,
        "g" * 64,
        # lane 0 == its prime (4294967291 = 0xfffffffb, little-endian): not reduced
        "fbffffff" + "0" * 56,
        "ffffffff" * 8,
    ],
)
def test_10_invalid_hexdigest_rejected(text):
    with pytest.raises(ValueError):
        Setsum.from_hexdigest(text)


# ---------------------------------------------------------------------------------- algebra

items = st.lists(st.binary(max_size=64), max_size=20)
lanes = st.tuples(*(st.integers(min_value=0, max_value=p - 1) for p in PRIMES))
setsums = lanes.map(Setsum)


@given(setsums, setsums)
def test_11_addition_commutes(a, b):
    assert a + b == b + a


@given(setsums, setsums, setsums)
def test_12_addition_associates(a, b, c):
    assert (a + b) + c == a + (b + c)


@given(setsums, setsums)
def test_13_subtraction_undoes_addition(a, b):
    assert a + b - b == a
    assert a - b + b == a


@given(setsums)
def test_14_empty_is_identity(a):
    assert a + Setsum() == a
    assert a - a == Setsum()


@given(setsums, st.binary(max_size=100))
def test_15_insert_remove_inverse(a, item):
    assert a.insert(item).remove(item) == a
    assert a.remove(item).insert(item) == a


@given(items, st.randoms(use_true_random=False))
def test_16_sum_of_parts_is_whole(values, rng):
    cuts = sorted(rng.randrange(len(values) + 1) for _ in range(rng.randrange(4)))
    bounds = [0, *cuts, len(values)]
    parts = [Setsum.of(*values[a:b]) for a, b in itertools.pairwise(bounds)]
    shuffled = list(values)
    rng.shuffle(shuffled)
    assert Setsum.sum(parts) == Setsum.of(*values) == Setsum.of(*shuffled)
    assert sum(parts, Setsum()) == Setsum.of(*values)
