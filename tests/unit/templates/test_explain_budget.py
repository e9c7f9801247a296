"""The explanation budget: after an explanation, the next one waits for three times as long of other work."""

from __future__ import annotations

from msnb.templates.msnb_runtime.handler.explain_budget import ExplainBudget


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def test_the_first_explanation_is_admitted_and_the_next_waits_for_its_share():
    clock = Clock()
    budget = ExplainBudget(share=0.25, clock=clock, burst=0)
    budget.spend(3.0)  # the first batch (with Captum's imports) is not charged
    assert budget.admit()
    budget.spend(0.5)  # took half a second: the worker does 1.5 s of other work before the next one
    clock.now += 1.4
    assert not budget.admit()
    refusal = budget.refusal()
    assert refusal.status == 503 and refusal.headers == {"Retry-After": "1"} and budget.refused == 1
    assert "25% of the worker's time" in refusal.hint
    clock.now += 0.1
    assert budget.admit()


def test_retry_after_is_whole_seconds_until_the_next_admission():
    clock = Clock()
    budget = ExplainBudget(share=0.25, clock=clock, burst=0)
    budget.spend(3.0)  # the first batch (with Captum's imports) is not charged
    budget.spend(2.0)  # 6 s of other work before the next explanation
    clock.now += 0.5
    assert budget.retry_after() == 6
    assert budget.refusal().headers["Retry-After"] == "6"


def test_a_share_of_one_never_refuses():
    clock = Clock()
    budget = ExplainBudget(share=1.0, clock=clock)
    budget.spend(10.0)
    assert budget.admit()


def test_a_few_explanations_in_a_row_pass_on_credit_and_sustained_ones_are_paced():
    clock = Clock()
    budget = ExplainBudget(share=0.25, clock=clock, burst=1.5)
    budget.spend(3.0)  # the first batch (with Captum's imports) is not charged
    admitted = 0
    while budget.admit():  # back to back, 0.1 s each: each owes 0.3 s of other work
        budget.spend(0.1)
        clock.now += 0.1
        admitted += 1
    assert 3 <= admitted <= 8  # a user's few explanations in a row are answered
    assert budget.refusal().status == 503
    clock.now += 2.0  # other work: credit again
    assert budget.admit()
