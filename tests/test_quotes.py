"""A number the course's text quotes is checked against the stored output or record it names
(``workbench.course.quotes``; docs/quoting.md): the words cannot drift from the run they
describe."""

from __future__ import annotations

import json
from pathlib import Path

import nbformat
import pytest

from workbench.course.quotes import QuoteError, check_notebook, quotes, unreferenced

ROOT = Path(__file__).resolve().parent.parent


def code(text: str, tag: str) -> dict:
    return nbformat.v4.new_code_cell(
        "print(...)",
        metadata={"tags": [tag]},
        outputs=[nbformat.v4.new_output("stream", name="stdout", text=text)],
    )


def markdown(text: str) -> dict:
    return nbformat.v4.new_markdown_cell(text)


TABLE = code(
    "actors   SEED ms  MB   IMPALA ms  MB\n"
    "     4   0.67   48   1.05   273\n"
    "    16   0.65   48   1.53   273\n",
    "costs",
)


def test_a_quote_equal_at_its_precision_holds():
    cells = [TABLE, markdown('IMPALA-style actors need 1.5<!--out:costs "16" #3--> ms a step.')]
    assert check_notebook(cells, ROOT / "data") == []  # 1.53 is 1.5 at one decimal


def test_a_quote_off_by_more_than_its_precision_fails():
    cells = [TABLE, markdown('SEED needs 0.5<!--out:costs "16"--> ms a step.')]
    assert check_notebook(cells, ROOT / "data") == ['cell 1: 0.5 (=) but out:costs "16" gives 0.65']


def test_the_nth_number_after_the_label_is_read():
    cells = [TABLE, markdown('IMPALA-style actors take 273 MB<!--out:costs "    4" #4--> each.')]
    assert check_notebook(cells, ROOT / "data") == []


def test_about_allows_the_percentage_it_names():
    cells = [
        TABLE,
        markdown('about 50 MB<!--out:costs "16" #2 ~3%--> and 260 MB<!--out:costs "16" #4 ~10%-->'),
    ]
    assert check_notebook(cells, ROOT / "data") == [
        'cell 1: 50 (~3%) but out:costs "16" #2 gives 48'
    ]


def test_an_inequality_compares_the_value_with_the_quote():
    cells = [
        TABLE,
        markdown(
            'never above 1.6 ms<!--out:costs "16" #3 <-->, at least 1 ms<!--out:costs "16" #3 >=-->'
        ),
    ]
    assert check_notebook(cells, ROOT / "data") == []


def test_without_a_label_any_printed_number_may_match():
    cells = [TABLE, markdown("a mean of 1.05<!--out:costs--> ms")]
    assert check_notebook(cells, ROOT / "data") == []


def test_a_real_record_is_read_across_lines():
    text = (
        "seed 0 reached 18 after 1,583,104 env steps<!--data:learning_ppo_pong_fast.json\n"
        "recipes.ppo-pong-fast.runs[seed=0].steps_to_target-->"
    )
    assert check_notebook([markdown(text)], ROOT / "data") == []


def test_a_divisor_scales_the_value_to_the_quotes_unit(tmp_path):
    (tmp_path / "run.json").write_text(json.dumps({"transitions": 1_481_142}))
    text = (
        "1.48M<!--data:run.json transitions /1e6--> and"
        " 1,481k<!--data:run.json transitions /1000 <-->"
    )
    assert check_notebook([markdown(text)], tmp_path) == [
        "cell 0: 1,481 (<) but data:run.json transitions gives 1481.14"
    ]


def test_a_record_is_read_by_keys_indices_and_row_filters(tmp_path):
    (tmp_path / "study.json").write_text(
        json.dumps({"rows": [{"actors": 4, "mb": 48.2}, {"actors": 16, "mb": 47.9}]})
    )
    text = (
        "48 MB<!--data:study.json rows[actors=16].mb--> and 48.2<!--data:study.json rows[0].mb-->"
    )
    assert check_notebook([markdown(text)], tmp_path) == []
    assert quotes([markdown(text)])[0].spec == "study.json rows[actors=16].mb"


@pytest.mark.parametrize(
    "text, fix",
    [
        ("4<!--out:nowhere-->", "tag the one"),
        ('4<!--out:costs "no such label"-->', "no output line"),
        ('4<!--out:costs "16" #9-->', "not 9"),
        ("4<!--data:missing.json rows[0]-->", "name a file in data/"),
        ("4<!--data:learning.json no.such.key-->", "has no number at"),
    ],
)
def test_a_reference_to_nothing_names_the_fix(text, fix):
    with pytest.raises(QuoteError, match=fix):
        check_notebook([TABLE, markdown(text)], ROOT / "data")


def stored(name: str) -> list:
    return nbformat.read(ROOT / "notebooks" / name, as_version=4).cells


def test_it_catches_notebook_07s_old_memory_figures_against_its_stored_outputs():
    """07 once said "about 40 MB against 320 MB" beside outputs and a record of 48 and 273."""
    cells = stored("07_seed_central_inference.ipynb")
    old = markdown(
        'env-only actors (about 40 MB<!--out:costs "16" #2 ~10%--> each); IMPALA-style actors'
        ' (about 320 MB<!--out:costs "16" #5 ~10%--> each)'
    )
    index = len(cells)
    assert check_notebook(cells + [old], ROOT / "data") == [
        f'cell {index}: 40 (~10%) but out:costs "16" #2 gives 48',
        f'cell {index}: 320 (~10%) but out:costs "16" #5 gives 273',
    ]


def test_it_catches_notebook_03s_answer_that_the_largest_batch_never_reaches_475():
    """03's worked answer expected ``steps_to(475)`` to be None; the stored full run reached 500."""
    cells = stored("03_a2c_ppo_large_batch.ipynb")
    study = next(
        i for i, c in enumerate(cells) if c.source.startswith("ppo_curves = batch_size_study")
    )
    cells[study].metadata["tags"] = ["batches"]
    answer = markdown('The 512 x 32 run never reaches 475<!--out:batches "16384: return" <-->.')
    assert check_notebook(cells + [answer], ROOT / "data") == [
        f'cell {len(cells)}: 475 (<) but out:batches "16384: return" gives 500'
    ]


def test_digits_inside_a_word_are_not_numbers():
    cells = [
        code("ratio 0.61   SEED p99 2.2 ms\n", "latency"),
        markdown('2.2 ms<!--out:latency "ratio" #2-->'),
    ]
    assert check_notebook(cells, ROOT / "data") == []  # p99's 99 is a name, not a value


def test_an_exponent_is_part_of_its_number():
    cells = [
        code("   64  1.00e-03    500\n", "table"),
        markdown('lr 0.001<!--out:table "   64"--> and 500<!--out:table "   64" #2-->'),
    ]
    assert check_notebook(cells, ROOT / "data") == []  # 1.00e-03 is one number, not 1.00 and 03


# Coverage: a measured number in the text carries a reference, a source or the mark of a setting.


def test_a_measured_number_without_a_reference_is_named():
    found = unreferenced([markdown("SEED's actors stay near 48 MB against 273 MB.")])
    assert [f.split(":")[1].strip() for f in found] == [
        "'48 MB' has no reference",
        "'273 MB' has no reference",
    ]


def test_every_number_listed_before_a_unit_shares_it():
    found = unreferenced([markdown("The layouts gave 1,918, 1,607 and 1,049 env steps/s.")])
    assert len(found) == 3 and "'1,918'" in found[0] and "'1,607'" in found[1]


def test_references_cited_sources_and_settings_cover_a_number():
    text = (
        'near 48 MB<!--out:costs "16" #2--> against 273 MB<!--out:costs "16" #5-->; the paper\'s'
        " 2,500 steps/s<!--cite:Horgan et al. 2018, Table 1-->; 10 s<!--setting--> windows"
    )
    assert unreferenced([TABLE, markdown(text)]) == []


def test_a_cited_source_must_be_named():
    assert len(unreferenced([markdown("the paper's 2,500 steps/s<!--cite-->")])) == 1


def test_shapes_code_math_links_and_the_glossary_are_not_results():
    text = (
        "a 4×84×84 stack; batches of 128 × 32; `took 35 s`; $2 ms$; [runs](runs/10s.json);"
        " https://arxiv.org/abs/1803.00933\n\n*Expected time on 2 CPU cores: about 30 s.*"
    )
    assert unreferenced([markdown(text), markdown("## Glossary\n\n- **x**: takes 35 s.")]) == []


def test_a_derived_number_must_follow_from_two_referenced_ones():
    ratio = "from 803<!--data:l.json a--> to 1,510 steps/s<!--data:l.json b--> ({}x<!--derived-->)"
    assert unreferenced([markdown(ratio.format("1.88"))]) == []  # 1510 / 803
    assert unreferenced([markdown(ratio.format("2.10"))]) != []
    assert unreferenced([markdown("a gain of 88%<!--derived--> alone")]) != []


def test_a_bound_in_a_reference_is_read_not_cut_at_its_greater_than_sign():
    (quote,) = quotes([markdown('reached 500<!--out:batches "512x32" >=--> steps')])
    assert (quote.spec, quote.op) == ('batches "512x32"', ">=")


def test_a_long_reference_over_lines_after_the_unit_covers_its_number():
    text = (
        "seed 0 reached 18 after 1,583,104 env steps<!--data:learning_ppo_pong_fast.json\n"
        "recipes.ppo-pong-fast.runs[seed=0].steps_to_target--> on two cores"
    )
    assert unreferenced([markdown(text)]) == []


def test_a_range_s_first_number_shares_the_unit_of_its_last():
    assert len(unreferenced([markdown("batch 1 ran 1,350-1,600 env steps/s")])) == 2
