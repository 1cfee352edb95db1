"""Levenshtein distance, for word error rates (bench/quality.py) and phoneme error rates
(bench/text_browser.py, tests/test_web_text.py)."""

from __future__ import annotations

from collections.abc import Sequence


def edit_distance(reference: Sequence, hypothesis: Sequence) -> int:
    """Insertions, deletions and substitutions that turn ``reference`` into ``hypothesis``:
    of characters for two strings, of words for two lists of words."""
    row = list(range(len(hypothesis) + 1))
    for i, r in enumerate(reference, 1):
        previous, row[0] = row[0], i
        for j, h in enumerate(hypothesis, 1):
            previous, row[j] = row[j], min(row[j] + 1, row[j - 1] + 1, previous + (r != h))
    return row[-1]
