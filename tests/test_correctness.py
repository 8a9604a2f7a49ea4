from servebench.correctness import GateAnswer, compare

REF = GateAnswer(tokens=[[1, 2, 3, 4], [5, 6, 7, 8]], logprobs=[[-1.0] * 4, [-2.0] * 4],
                 top=[[[1, 9], [2, 9], [3, 9], [4, 9]], [[5, 9], [6, 7], [7, 9], [8, 9]]])


def answer(tokens, top=None, logprobs=None) -> GateAnswer:
    return GateAnswer(tokens=tokens, logprobs=logprobs or [[-1.0] * 4, [-2.0] * 4],
                      top=top or [[[t, 9] for t in row] for row in tokens])


def test_identical_tokens_pass():
    result = compare(REF, answer([[1, 2, 3, 4], [5, 6, 7, 8]], logprobs=[[-1.01] * 4, [-2.0] * 4]))
    assert result.status == "passed" and "0.0100" in result.detail


def test_a_near_tie_is_close_not_passed():
    # prompt 1 parts at token 1: 7 was the reference's runner-up, and 6 is the answer's runner-up
    got = answer([[1, 2, 3, 4], [5, 7, 1, 1]], top=[[[1, 9], [2, 9], [3, 9], [4, 9]], [[5, 9], [7, 6], [1], [1]]])
    result = compare(REF, got)
    assert result.status == "close" and "prompt 1 token 1" in result.detail


def test_divergence_outside_the_top_candidates_fails():
    result = compare(REF, answer([[1, 2, 3, 4], [42, 43, 44, 45]]))
    assert result.status == "failed" and "prompt 1 token 0" in result.detail
