"""The sync's record ids held compactly (model/ids.py): the same answers as sets and
dicts of the ids' strings, for ids of mem's form and of any other, in a fraction of the
memory (a million records' pull holds every id a few times)."""

from __future__ import annotations

import tracemalloc
import uuid
from pathlib import Path

from hypothesis import given, settings
from hypothesis import strategies as st

from memvault.model.ids import IdList, IdMap, IdSet, pack, unpack
from memvault.model.records import uuid7
from memvault.ops import sync as sync_ops

# mem's own ids, UUIDs of other versions, and ids of any other form: near misses of the
# canonical one (uppercase, blanks, braces, a hyphen moved) and any text at all.
ANY_ID = st.one_of(
    st.builds(uuid7), st.builds(lambda: str(uuid.uuid4())),
    st.builds(lambda: str(uuid.uuid4()).upper()),
    st.builds(lambda: " " + str(uuid.uuid4())[1:]),
    st.builds(lambda: str(uuid.uuid4()).replace("-", " ", 1)),
    st.builds(lambda: "{" + str(uuid.uuid4())[1:-1] + "}"),
    st.builds(lambda: str(uuid.uuid4())[:8] + str(uuid.uuid4())[8:].replace("-", "", 1) + "-"),
    st.text(max_size=40))


@given(st.text(max_size=40) | ANY_ID)
def test_an_id_is_packed_only_when_its_16_bytes_spell_it_back(memory_id: str) -> None:
    key = pack(memory_id)
    if key is not None:
        assert len(key) == 16 and unpack(key) == memory_id
    else:  # kept as it is: never an id of mem's own form
        assert not _uuid(memory_id) or str(uuid.UUID(memory_id)) != memory_id


def _uuid(text: str) -> bool:
    try:
        uuid.UUID(text)
    except ValueError:
        return False
    return True


def test_every_id_mem_makes_is_packed() -> None:
    assert all(pack(i) is not None for i in (uuid7() for _ in range(1000)))


@settings(max_examples=200, deadline=None)
@given(st.lists(ANY_ID, max_size=120), st.lists(ANY_ID, max_size=60),
       st.lists(st.sampled_from(["a", "b", "c"]), min_size=1))
def test_the_compact_forms_answer_as_sets_and_dicts_do(
        held: list[str], others: list[str], names: list[str]) -> None:
    ids, seen = IdSet(held), set(held)
    gone = others[::2] + held[::3]
    for i in gone:
        ids.discard(i)
        seen.discard(i)
    assert len(ids) == len(seen) and set(ids) == seen
    assert all((i in ids) == (i in seen) for i in held + others)
    assert sorted(ids.minus(set(others))) == sorted(seen - set(others))
    assert sorted(ids.minus(IdSet(others))) == sorted(seen - set(others))
    listed = IdList.of(held)
    assert sorted(listed) == sorted(held) and len(listed) == len(held)
    assert IdList.from_json(listed.to_json()) == listed
    assert listed.any_in(IdSet(others)) == bool(set(held) & set(others))
    assert sorted(listed.minus(IdSet(others))) == sorted(i for i in held if i not in others)
    grown = IdSet(others)
    grown.update(listed)
    grown.difference_update(IdList.of(others[1::2]))
    assert set(grown) == (set(others) | set(held)) - set(others[1::2])
    owners_answer_as_a_dict(held, others, names)


def owners_answer_as_a_dict(held: list[str], others: list[str], names: list[str]
                            ) -> tuple[IdMap, dict[str, str]]:
    """An IdMap filled as a pull fills it (each id -> the first name it came with,
    unless set again) answers as the dict filled alike; both, for more checks."""
    owners, owned = IdMap(), {}
    for k, i in enumerate(held + others):
        name = names[k % len(names)]
        if k % 4:
            owners.setdefault_all(IdList.of([i]), name)
            owned.setdefault(i, name)
        else:
            owners[i] = name
            owned[i] = name
    assert dict(owners.items()) == owned and len(owners) == len(owned)
    assert dict(owners.missing_from(IdSet(others))) == {
        i: n for i, n in owned.items() if i not in set(others)}
    assert all(owners.get(i) == owned.get(i) for i in held + others)
    return owners, owned


def test_a_million_ids_take_a_few_dozen_bytes_each() -> None:
    """What a pull of a million records holds of each id, a few times over: a set of
    their strings takes over 100 bytes an id."""
    ids = [uuid7() for _ in range(200_000)]
    tracemalloc.start()
    try:
        held = IdSet(ids)
        owners = IdMap()
        owners.setdefault_all(IdList.of(ids), "ns/o/k-1")
        used = tracemalloc.get_traced_memory()[0]
    finally:
        tracemalloc.stop()
    assert len(held) == len(owners) == len(ids)
    assert used / len(ids) < 2 * 40


def test_a_cache_of_many_ids_is_read_back_compact(tmp_path: Path) -> None:
    """The cache names every id three times (its object, its file, as held here): read
    back, each is its 16 bytes a few times, not three strings."""
    ids = [uuid7() for _ in range(120_000)]
    cache = sync_ops.Cache(
        objects={f"ns/o/k-{n}": {"kind": "add", "at": "t",
                                 "ids": IdList.of(ids[n * 2000:(n + 1) * 2000]),
                                 "archived": IdList(), "v": {}} for n in range(60)},
        local=IdSet(ids), epoch=1, keys={"k"}, last_sync="t", remote="/r",
        files={f"sessions/s{n}.jsonl": [1, 2, IdList.of(ids[n * 100:(n + 1) * 100])]
               for n in range(1200)})
    path, kek = tmp_path / "c.json", b"k" * 32
    sync_ops.save_cache(path, kek, cache)
    tracemalloc.start()
    try:
        back = sync_ops.load_cache(path, kek)
        used = tracemalloc.get_traced_memory()[0]
    finally:
        tracemalloc.stop()
    assert (back.objects, back.files, sorted(back.local)) == (
        cache.objects, cache.files, sorted(ids))
    assert used / len(ids) < 100
