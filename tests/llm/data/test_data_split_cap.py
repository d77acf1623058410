"""The val split's cap on one document's share of its tokens, and the composition the cache records."""

from __future__ import annotations

import logging

import pytest

from llm.data import data_fingerprint, prepare_data
from llm.data.split import MIN_VAL_DOCS, VAL_DOC_CAP, cap_val_documents, val_score
from llm.data.tokenizer import get_tokenizer


def test_cap_moves_the_largest_documents_until_none_is_above_ten_percent():
    one = cap_val_documents([1000] + [100] * 20)  # 1000 of 3000 tokens: a third of val
    assert one.moved == [0] and one.kept == list(range(1, 21)) and one.met
    cascade = cap_val_documents([50] * 10 + [400, 300] + [50] * 10)  # 400/1700, then 300/1300, then 50/1000
    assert cascade.moved == [10, 11] and cascade.met
    fine = cap_val_documents([100] * 12)
    assert fine.moved == [] and fine.met
    assert VAL_DOC_CAP == 0.1 and MIN_VAL_DOCS == 10


def test_too_few_documents_cannot_meet_the_cap_and_are_left_alone():
    few = cap_val_documents([100] * 9)  # one of 9 equal documents holds 11%: no move can fix that
    assert few.moved == [] and not few.met
    ten = cap_val_documents([5000] + [100] * 10)  # moving the big one leaves the 10 the cap needs
    assert ten.moved == [0] and ten.met
    nine = cap_val_documents([5000] + [100] * 9)  # moving it would leave 9: kept, and the cap is not met
    assert nine.moved == [] and not nine.met


def test_where_no_moves_meet_the_cap_the_smallest_largest_share_is_kept():
    """A long tail (a standard library without its test suite: a 5% split of 37 files moved 27 of them and kept 10,
    the largest at 21%): moving the largest shrinks the total the next is measured against. The moves stop where
    the largest share left is smallest: here after the first (100 of 565 tokens, 17.7%; all four allowed moves
    would leave 70 of 295, 23.7%)."""
    tail = cap_val_documents([400, 100, 90, 80, 70, 60, 50, 40, 30, 20, 10, 5, 5, 5])
    assert tail.moved == [0] and tail.kept == list(range(1, 14)) and not tail.met
    empty = cap_val_documents([])
    assert empty.kept == empty.moved == [] and empty.met


def test_a_dominant_val_document_moves_to_train_and_the_composition_says_so(tmp_path, make_corpus, text_cfg, docs):
    corpus = make_corpus(tmp_path / "corpus", n_txt=40)
    big_text = "a long document of prose " * 2000
    assert val_score("big0.txt") < 0.5
    (corpus / "big0.txt").write_text(big_text)
    d = prepare_data(text_cfg(corpus, val_fraction=0.5), "cl100k_base", tmp_path / "cache")
    enc = get_tokenizer("cl100k_base")
    assert big_text in docs(d.train, enc) and big_text not in docs(d.val, enc)
    val = d.meta["composition"]["val"]
    assert val["moved_to_train"] == ["big0.txt"] and val["cap_met"] and val["largest_share"] <= VAL_DOC_CAP
    assert val["documents"] == len(docs(d.val, enc)) and val["tokens"] == len(d.val)
    train = d.meta["composition"]["train"]
    assert train["largest_document"] == "big0.txt" and train["tokens"] == len(d.train)
    fp = data_fingerprint(d.meta)["split"]
    assert fp["val_largest_share"] == val["largest_share"] and fp["val_cap_met"] is True


def test_a_small_val_split_is_kept_whole_with_a_warning(tmp_path, make_corpus, text_cfg, caplog):
    corpus = make_corpus(tmp_path / "corpus", n_txt=12)
    with caplog.at_level(logging.WARNING, logger="llm.data.cache"):
        d = prepare_data(text_cfg(corpus, val_fraction=0.2), "cl100k_base", tmp_path / "cache")
    val = d.meta["composition"]["val"]
    assert val["documents"] < MIN_VAL_DOCS and not val["cap_met"] and val["moved_to_train"] == []
    assert "over the 10% cap" in caplog.text and "data.val_fraction" in caplog.text


@pytest.mark.slow
def test_pystdlib_val_split_holds_no_dominant_file(tmp_path):
    """The standard library's val split by path held pydoc_data/topics.py (English prose) at over half its tokens."""
    from llm.data.sources.pystdlib import stdlib_root

    if not (stdlib_root() / "test" / "test_doctest.py").is_file():  # Debian and Ubuntu ship the test suite apart
        pytest.skip("a standard library without its test suite: a 5% val split of its few hundred files has too few "
                    "documents to meet the cap (the small-split warning's case, tested above)")
    d = prepare_data({"name": "pystdlib", "val_fraction": 0.05}, "cl100k_base", tmp_path)
    val = d.meta["composition"]["val"]
    assert val["cap_met"] and val["largest_share"] <= VAL_DOC_CAP and val["documents"] >= MIN_VAL_DOCS
