"""Where the pack changes how Milvus Lite (3.2), which runs inside the process that opens a
``.db`` file, writes and loads its rows: each change gives what Lite's own code gives, faster
or in less memory (``tests/milvus/test_lite_writes.py`` compares them on the pinned release),
and changes nothing where Lite's code is not the one described.

* :func:`flush_rows_by_column`: a flush takes the unflushed rows column by column;
* :func:`check_vector_elements_at_once`: a vector of plain numbers is checked in one pass;
* :func:`share_flat_vectors`: a reopened segment's FLAT index is its own vectors, not a
  second copy read from the index file;
* :func:`release_arrow_memory`: Arrow's pool hands back what Lite's reads and writes freed.

:func:`tune_lite` applies the first three (the first client the pack opens calls it).
"""

from __future__ import annotations

import contextlib
import itertools
import operator
from collections.abc import Iterator
from typing import Any

__all__ = [
    "check_vector_elements_at_once",
    "columnar_table",
    "flush_rows_by_column",
    "release_arrow_memory",
    "share_flat_vectors",
    "tune_lite",
]


def tune_lite() -> None:
    """Apply the changes to Milvus Lite's writes and loads (each once per process)."""
    flush_rows_by_column()
    check_vector_elements_at_once()
    share_flat_vectors()


def columnar_table(memtable: Any, rows: list[tuple[int, int]]) -> Any:
    """The segment table of Lite's ``MemTable`` for ``rows`` (``(batch, row)`` pairs, in
    order), taken from the batches column by column; ``None`` where a batch's columns are not
    the segment's schema (or there is no row)."""
    import pyarrow as pa

    schema = memtable._data_schema
    pieces = []
    for batch_index, group in itertools.groupby(rows, key=operator.itemgetter(0)):
        batch = memtable._insert_batches[batch_index].select(schema.names)
        if not batch.schema.equals(schema):
            return None
        pieces.append(batch.take(pa.array([row for _, row in group], pa.int64())))
    return pa.Table.from_batches(pieces, schema=schema) if pieces else None


def flush_rows_by_column() -> bool:
    """Milvus Lite (3.2) seals its unflushed rows by reading every cell back as a Python value
    (``MemTable._build_data_table``: per row, per column, ``as_py()``) and building the segment's
    table from those lists: a flush of 50,000 384-d sentence rows held about 900 MB of Python
    floats at once, and took a fifth of the write time. The same table is taken column by
    column from the rows' own Arrow batches (``RecordBatch.take``, in the same order); where a
    batch's columns are not the segment's schema, Lite's own function builds it. Nothing changes
    where Lite's memtable is not this one; whether it was changed is returned."""
    try:
        from milvus_lite.storage.memtable import MemTable
    except ImportError:  # pragma: no cover - milvus-lite is a dependency
        return False
    given = getattr(MemTable, "_build_data_table", None)
    if getattr(given, "rag_pack_columnar", False):
        return True
    if getattr(given, "__qualname__", "") != "MemTable._build_data_table":
        return False  # not Lite's own function: left alone

    def build_data_table(self: Any, rows: list[tuple[int, int]]) -> Any:
        table = columnar_table(self, rows)
        return given(self, rows) if table is None else table

    build_data_table.rag_pack_columnar = True  # type: ignore[attr-defined]
    MemTable._build_data_table = build_data_table
    return True


_NUMBERS = frozenset((int, float))


class _ElementsChecked(list):  # type: ignore[type-arg]
    """A vector whose elements were checked: Lite's own check finds none left to walk."""

    def __iter__(self) -> Iterator[Any]:
        return iter(())


def check_vector_elements_at_once() -> bool:
    """Milvus Lite (3.2) checks a row's vector element by element in Python (a tenth of an
    insert's time at 384-d). A ``list`` of the field's dimension of only ``int`` and ``float``
    values (what its gRPC adapter makes of every row) passes that check: decided here in one
    C-level pass, Lite's own ``validate_record`` checking the rest of the row. Any other vector
    goes through Lite's check as it is. Nothing changes where Lite's validation is not this
    one; whether it was changed is returned."""
    try:
        from milvus_lite.engine import collection as engine
        from milvus_lite.schema import validation
    except ImportError:  # pragma: no cover - milvus-lite is a dependency
        return False
    given = getattr(engine, "validate_record", None)
    if getattr(given, "rag_pack_elements_at_once", False):
        return True
    find = getattr(validation, "_find_float_vector", None)
    if given is not getattr(validation, "validate_record", None) or not callable(find):
        return False  # not Lite's own validation: left alone

    def validate_record(record: Any, schema: Any, *args: Any, **kwargs: Any) -> Any:
        field = find(schema) if isinstance(record, dict) else None
        vector = record.get(field.name) if field is not None else None
        if (
            type(vector) is not list
            or len(vector) != field.dim
            or not _NUMBERS.issuperset(map(type, vector))
        ):
            return given(record, schema, *args, **kwargs)
        record[field.name] = _ElementsChecked(vector)
        try:
            return given(record, schema, *args, **kwargs)
        finally:
            record[field.name] = vector

    validate_record.rag_pack_elements_at_once = True  # type: ignore[attr-defined]
    engine.validate_record = validate_record
    return True


def release_arrow_memory() -> None:
    """Hand back to the system the memory Arrow's pool keeps after it was freed. Milvus Lite
    reads and writes its data files through Arrow, whose pool (mimalloc) keeps what a read
    freed: opening a collection of 21,000 sentences left about 100 MB of it resident. Called
    after the pack opens its collections, after each slice of an insert and after a flush."""
    with contextlib.suppress(Exception):  # pyarrow comes with milvus-lite; any failure: kept
        import pyarrow

        pyarrow.default_memory_pool().release_unused()


def share_flat_vectors() -> bool:
    """Milvus Lite (3.2) reloads a segment's FLAT index from its index file: a second copy of
    the segment's vectors beside the ones it already holds (1.5 KB per 384-d row; 300 MB for
    the 210,000 sentences of 20,000 documents). A FLAT index is those vectors, so a reopened
    segment's is built on them, as a new segment's is (a reference, no copy); the index file
    stays as Lite wrote it. Other index types load as Lite loads them. Nothing changes where
    Lite's segment is not this one; whether it was changed is returned."""
    try:
        from milvus_lite.index import factory
        from milvus_lite.storage.segment import Segment
    except ImportError:  # pragma: no cover - milvus-lite is a dependency
        return False
    given = getattr(factory, "load_index_from_spec", None)
    if getattr(given, "rag_pack_shared", False):
        return True
    build_or_load = getattr(Segment, "build_or_load_index", None)
    if not callable(build_or_load) or not callable(given):
        return False

    def load_index_from_spec(spec: Any, path: str, dim: int) -> Any:
        vectors = _LOADING.get(path)
        if vectors is not None:
            return factory.build_index_from_spec(spec, vectors)
        return given(spec, path, dim)

    def build_or_load_index(self: Any, spec: Any, index_dir: str, *args: Any, **kwargs: Any) -> Any:
        if spec.index_type not in ("BRUTE_FORCE", "FLAT") or not self.num_rows:
            return build_or_load(self, spec, index_dir, *args, **kwargs)  # as Lite does it
        path = self.index_file_path(index_dir, spec.index_type, spec.field_name)
        _LOADING[path] = self.vector_data(spec.field_name)[0]
        try:
            return build_or_load(self, spec, index_dir, *args, **kwargs)
        finally:
            _LOADING.pop(path, None)

    load_index_from_spec.rag_pack_shared = True  # type: ignore[attr-defined]
    factory.load_index_from_spec = load_index_from_spec
    Segment.build_or_load_index = build_or_load_index
    return True


# an index file being loaded -> the vectors of its segment
_LOADING: dict[str, Any] = {}
