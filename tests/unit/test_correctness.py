"""The correctness gate on recorded answers: exact shapes, vLLM's first-divergence near-tie rule, blocking."""

import pytest

from servebench.serving.correctness import Divergence, GateAnswer, GateResult, blocks_cells, compare, unchecked

# A random-weight model (vocab 32000, bf16): logits nearly flat, every logprob near ln(1/32000) = -10.37,
# the top candidates a few thousandths apart. 4 prompts x 4 tokens, top-5 candidates per position.
REFERENCE = GateAnswer(  # TP=1, Intel Xeon
    tokens=[[8113, 27104, 914, 19230], [30511, 2267, 2267, 16622],
            [12906, 21817, 5530, 9931], [401, 17, 28817, 6120]],
    logprobs=[[-10.3412, -10.3520, -10.3388, -10.3605], [-10.3477, -10.3561, -10.3590, -10.3433],
              [-10.3551, -10.3673, -10.3802, -10.3590], [-10.3498, -10.3529, -10.3617, -10.3450]],
    top=[[[8113, 5, 77, 23001, 912], [27104, 3310, 18, 4409, 27], [914, 640, 31007, 2, 88], [19230, 7, 15, 100, 6]],
         [[30511, 9, 30, 1234, 40], [2267, 8, 31, 1235, 41], [2267, 10, 32, 1236, 42], [16622, 11, 33, 1237, 43]],
         [[12906, 12, 34, 1238, 44], [21817, 4410, 118, 30077, 6623], [5530, 13, 35, 1239, 45],
          [9931, 14, 36, 1240, 46]],
         [[401, 15, 37, 1241, 47], [17, 16, 38, 1242, 48], [28817, 19, 39, 1243, 49], [6120, 20, 50, 1244, 51]]])

# TP=2 on an AMD EPYC, as recorded: prompt 2 parts at token 1, where the reference's 21817 and this
# server's 4410 are each other's runner-up, 0.0039 apart; after that the prompt's tokens are unrelated.
NEAR_TIE = GateAnswer(
    tokens=[[8113, 27104, 914, 19230], [30511, 2267, 2267, 16622],
            [12906, 4410, 29999, 777], [401, 17, 28817, 6120]],
    logprobs=[[-10.3420, -10.3511, -10.3391, -10.3611], [-10.3470, -10.3582, -10.3585, -10.3440],
              [-10.3549, -10.3634, -10.3711, -10.3700], [-10.3501, -10.3522, -10.3620, -10.3446]],
    top=[[[8113, 5, 77, 23001, 912], [27104, 3310, 18, 4409, 27], [914, 640, 31007, 2, 88], [19230, 7, 15, 100, 6]],
         [[30511, 9, 30, 1234, 40], [2267, 8, 31, 1235, 41], [2267, 10, 32, 1236, 42], [16622, 11, 33, 1237, 43]],
         [[12906, 12, 34, 1238, 44], [4410, 21817, 118, 30077, 6623], [29999, 60, 61, 62, 63],
          [777, 64, 65, 66, 67]],
         [[401, 15, 37, 1241, 47], [17, 16, 38, 1242, 48], [28817, 19, 39, 1243, 49], [6120, 20, 50, 1244, 51]]])


def recorded(answer: GateAnswer = REFERENCE) -> GateAnswer:
    return answer.model_copy(deep=True)


def test_identical_answers_pass_with_the_logprob_drift_recorded():
    answer = recorded()
    answer.logprobs[3][2] += 0.0021
    result = compare(REFERENCE, answer)
    assert result.status == "passed" and result.first_divergence == []
    assert result.max_prefix_logprob_diff == pytest.approx(0.0021, abs=1e-9) and "0.0021" in result.detail


@pytest.mark.parametrize("length", [3, 5])
def test_an_answer_of_another_length_fails_naming_the_prompt_and_both_lengths(length):
    answer = recorded()
    answer.tokens[1] = (answer.tokens[1] + [2267])[:length]    # equal on the common part
    result = compare(REFERENCE, answer)
    assert result.status == "failed" and f"prompt 1: {length} tokens, the reference 4" in result.detail


def test_fewer_prompts_answered_fail():
    answer = recorded()
    del answer.tokens[3], answer.logprobs[3], answer.top[3]
    result = compare(REFERENCE, answer)
    assert result.status == "failed" and "answered 3 prompts, the reference 4" in result.detail


def test_the_recorded_near_tie_is_close_with_its_position_and_logprob_gap():
    result = compare(REFERENCE, NEAR_TIE)
    assert result.status == "close" and "prompt 2 token 1" in result.detail and "0.0039" in result.detail
    [divergence] = result.first_divergence
    assert divergence.logprob_gap == pytest.approx(0.0039, abs=1e-9)
    assert divergence == Divergence(prompt=2, position=1, reference_token=21817, token=4410,
                                    logprob_gap=divergence.logprob_gap, near_tie=True)
    # the equal prefix: prompts 0, 1, 3 whole and prompt 2's token 0; largest gap at prompt 1 token 1
    assert result.max_prefix_logprob_diff == pytest.approx(0.0021, abs=1e-9)


def test_comparison_stops_at_the_first_divergence():
    # after the near-tie, prompt 2's tokens are far outside each other's top candidates: not looked at
    assert 29999 not in REFERENCE.top[2][2] and 5530 not in NEAR_TIE.top[2][2]
    assert compare(REFERENCE, NEAR_TIE).status == "close"


def test_a_token_outside_the_references_top_candidates_fails():
    answer = recorded()
    answer.tokens[3][0], answer.top[3][0] = 17777, [17777, 401, 37, 1241, 47]
    result = compare(REFERENCE, answer)
    assert result.status == "failed" and "prompt 3 token 0: answer token 17777 not in the reference's top-5" \
        in result.detail
    assert [(d.prompt, d.position, d.near_tie) for d in result.first_divergence] == [(3, 0, False)]


def test_the_reference_token_outside_the_answers_top_candidates_fails():
    answer = recorded(NEAR_TIE)
    answer.top[2][1] = [4410, 118, 30077, 6623, 3]             # 21817 is no longer the runner-up
    result = compare(REFERENCE, answer)
    assert result.status == "failed" and "reference token 21817 not in the answer's top-5" in result.detail


def test_a_failure_still_lists_the_near_ties():
    answer = recorded(NEAR_TIE)
    answer.tokens[0][3] = 42
    result = compare(REFERENCE, answer)
    assert result.status == "failed" and "near-ties: prompt 2 token 1" in result.detail
    assert [(d.prompt, d.near_tie) for d in result.first_divergence] == [(0, False), (2, True)]


@pytest.mark.parametrize("top", [[], [row[:1] for row in NEAR_TIE.top], [[[]] * 4] * 4])
def test_missing_top_candidates_prove_no_near_tie(top):
    answer = recorded(NEAR_TIE)
    answer.top = top
    result = compare(REFERENCE, answer)
    assert result.status == "failed" and "the answer reported no top candidates" in result.detail


def test_missing_top_candidates_do_not_matter_without_a_divergence():
    answer = recorded()
    answer.top = []
    assert compare(REFERENCE, answer).status == "passed"


def test_ragged_logprobs_leave_the_gap_unknown_instead_of_crashing():
    answer = recorded(NEAR_TIE)
    answer.logprobs[2] = answer.logprobs[2][:1]
    result = compare(REFERENCE, answer)
    assert result.status == "close" and result.first_divergence[0].logprob_gap is None


# the original small cases, still valid under the new rule
SMALL = GateAnswer(tokens=[[1, 2, 3, 4], [5, 6, 7, 8]], logprobs=[[-1.0] * 4, [-2.0] * 4],
                   top=[[[1, 9], [2, 9], [3, 9], [4, 9]], [[5, 9], [6, 7], [7, 9], [8, 9]]])


def small(tokens, top=None, logprobs=None) -> GateAnswer:
    return GateAnswer(tokens=tokens, logprobs=logprobs or [[-1.0] * 4, [-2.0] * 4],
                      top=top or [[[t, 9] for t in row] for row in tokens])


def test_identical_tokens_pass():
    result = compare(SMALL, small([[1, 2, 3, 4], [5, 6, 7, 8]], logprobs=[[-1.01] * 4, [-2.0] * 4]))
    assert result.status == "passed" and "0.0100" in result.detail


def test_a_near_tie_is_close_not_passed():
    # prompt 1 parts at token 1: 7 was the reference's runner-up, and 6 is the answer's runner-up
    got = small([[1, 2, 3, 4], [5, 7, 1, 1]], top=[[[1, 9], [2, 9], [3, 9], [4, 9]], [[5, 9], [7, 6], [1], [1]]])
    result = compare(SMALL, got)
    assert result.status == "close" and "prompt 1 token 1" in result.detail


def test_divergence_outside_the_top_candidates_fails():
    result = compare(SMALL, small([[1, 2, 3, 4], [42, 43, 44, 45]]))
    assert result.status == "failed" and "prompt 1 token 0" in result.detail


def gate(status: str) -> GateResult:
    return GateResult(status=status, detail="recorded")


@pytest.mark.parametrize("status, accept, blocks", [
    ("passed", "close", False), ("passed", "equal", False), ("passed", "near-ties", False),
    ("close", "close", False), ("close", "equal", True), ("close", "near-ties", False),
    ("failed", "close", True), ("failed", "equal", True), ("failed", "near-ties", True),
    ("reference", "close", False), ("reference", "equal", False), ("reference", "near-ties", False),
    ("unchecked", "close", False), ("unchecked", "equal", False), ("unchecked", "near-ties", False),
])
def test_blocks_cells(status, accept, blocks):
    assert blocks_cells(gate(status), accept) is blocks


def test_close_is_accepted_by_default():
    assert not blocks_cells(gate("close")) and blocks_cells(gate("failed"))


def test_an_unknown_accept_is_an_error_not_a_silent_default():
    with pytest.raises(ValueError, match="accept"):
        blocks_cells(gate("close"), "near-tie")


def test_unchecked_says_why_and_never_blocks():
    result = unchecked("the TP=1 server did not start: port 8000 in use")
    assert result.status == "unchecked" and "port 8000 in use" in result.detail and "reference" in result.detail
    assert result.first_divergence == [] and result.max_prefix_logprob_diff is None
    assert not any(blocks_cells(result, accept) for accept in ("close", "equal", "near-ties"))
