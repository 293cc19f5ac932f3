"""A tiny labelled text tree for the CLI tests (3 labels, 10 documents each, one empty)."""

from __future__ import annotations

import numpy as np

TOPICS = {
    "space": "rocket orbit nasa shuttle launch moon planet satellite astronaut telescope",
    "sport": "pitcher baseball fastball inning homerun batter league stadium season coach",
    "autos": "engine car brake tire dealer sedan gearbox clutch mileage highway",
}
COMMON = "the of and report today people said would could about time year"


def write_text_tree(root, *, n_per_label=10, seed=0, labels=None):
    """Write ``root/<label>/<i>.txt``; return {doc_id: text}."""
    rng = np.random.default_rng(seed)
    common = COMMON.split()
    texts = {}
    for label in labels or sorted(TOPICS):
        words = TOPICS[label].split()
        (root / label).mkdir(parents=True, exist_ok=True)
        for i in range(n_per_label):
            n_topic, n_common = rng.integers(4, 12), rng.integers(2, 8)
            text = " ".join(
                list(rng.choice(words, n_topic)) + list(rng.choice(common, n_common))
            )
            if label == "space" and i == 0:
                text = "a"  # no token of two letters or more: an empty document
            (root / label / f"{i:02d}.txt").write_text(text)
            texts[f"{label}/{i:02d}.txt"] = text
    return texts
