"""Bulk synthesis on Ray Data: audiobooks and speech datasets, on one machine or many.

    python -m kokoro_ext.bulk book.md out/ --artifacts artifacts --voice af_heart
    python -m kokoro_ext.bulk records.jsonl out/ --address auto --artifacts /shared/artifacts

``records`` reads the input (a table of records, or a book cut into chapters) and cuts
long records into pieces; ``worker`` is the Ray Data actor that synthesizes pieces;
``output`` writes each record's audio and words and the results table, atomically;
``run`` puts them together; ``progress`` draws the progress line.  A layer above the run
side: it imports kokoro_ext.run and kokoro_ext.text (and the speech server's encoders),
never the build side, and the run side never imports it (pyproject.toml's contracts).
Needs the ``bulk`` extra (Ray Data, pyarrow): docs/bulk.md.
"""

from __future__ import annotations

from kokoro_ext.bulk.run import BulkOptions, Summary, run

__all__ = ["BulkOptions", "Summary", "run"]
