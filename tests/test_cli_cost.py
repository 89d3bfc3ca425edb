"""The cost `agentlab run` prints says what it is: the price of the run's tokens at list price, and for a scripted
run that no money was spent."""

from __future__ import annotations

import argparse
import re

from agentlab.cli import _cost_words, main


def test_a_scripted_run_says_its_cost_is_a_list_price_and_no_money_was_spent(capsys):
    assert main(["run", "max_tokens_give_up"]) == 1
    summary = next(line for line in capsys.readouterr().out.splitlines() if line.startswith("error_max_output_tokens"))
    assert re.search(r"\$\d+\.\d{4} at list price for these tokens \(data/prices\.yaml\), not money spent: "
                     r"a scripted run$", summary), summary


def test_a_run_against_a_server_says_list_price_only_and_an_unknown_cost_stays_as_it_is():
    served = argparse.Namespace(base_url="http://127.0.0.1:9")
    assert _cost_words("$0.0100", 0.01, object(), served) == "$0.0100 at list price for these tokens (data/prices.yaml)"
    assert _cost_words("$0.0100", 0.01, None, argparse.Namespace(base_url=None)).endswith("(data/prices.yaml)")
    unknown = "cost unknown (no price for m)"
    assert _cost_words(unknown, None, object(), argparse.Namespace(base_url=None)) == unknown
