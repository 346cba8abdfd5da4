import math

import pytest
import torch

from core.config import TrainerConfig
from core.spaces import Action, Observation, parse_action
from models.lm.prompts import action_ids, fit_tree, policy_prompt_ids
from models.lm.saved import make_model
from models.lm.scoring import continuation_logprobs, score_continuations
from models.lm.tokenizer import build_tokenizer, decode, encode, pad_id
from models.policy.candidates import candidate_actions, instruction_texts
from models.policy.loss import policy_batch_loss
from models.policy.model import Policy
from models.policy.runner import PolicyRunner
from tests.factories import POLICY_CFG as CFG
from tests.factories import POLICY_OBS as OBS
from tests.factories import policy_rollout, policy_trajectory


@pytest.fixture(scope="module")
def policy():
    torch.manual_seed(0)
    return make_model(Policy, CFG)


def test_tokenizer_offline_save_load(tmp_path):
    from transformers import AutoTokenizer

    tok = build_tokenizer()
    assert (tok.pad_token_id, tok.eos_token_id, tok.unk_token_id) == (0, 1, 2)
    tok.save_pretrained(tmp_path)
    tok2 = AutoTokenizer.from_pretrained(tmp_path, local_files_only=True)
    s = 'click(3) type(5, "é ü")'
    assert encode(tok2, s) == encode(tok, s) == tok(s, add_special_tokens=False).input_ids
    assert decode(tok, encode(tok, "a</s>b") + [1]) == "a</s>b"


def test_instruction_texts():
    assert instruction_texts('Enter "Kiera" into the text field.') == ["Kiera"]
    assert instruction_texts("Type hello in the box") == ["hello"]
    t = instruction_texts("Enter the username 'bob' and the password \"x y\" then press login.")
    assert "x y" in t and "bob" in t
    assert instruction_texts("search for red shoes and click")[:2] == ["red", "red shoes"]
    t = instruction_texts(
        "Book the shortest one-way flight from: Cincinnati, OH to: LEX on 10/16/2016."
    )
    assert {"Cincinnati, OH", "LEX", "10/16/2016"} <= set(t)


def test_candidates_valid_and_parse():
    c = [a.to_text() for a in candidate_actions(OBS[0])]
    assert 'type(1, "Kiera")' in c and 'select(4, "Red")' in c and 'select(4, "Blue")' in c
    assert {"click(1)", "click(6)", 'press("Enter")', 'stop("")', 'scroll("down")'} <= set(c)
    assert len(c) == len(set(c))
    for obs in OBS:
        for a in candidate_actions(obs):
            assert parse_action(a.to_text()) == a
            assert (
                a.element is None
                or a.element in obs.element_ids
                or a.element in [int(x) for x in __import__("re").findall(r"\[(\d+)\]", obs.tree)]
            )
    assert 'type(7, "hello")' in [a.to_text() for a in candidate_actions(OBS[2])]
    assert len(candidate_actions(OBS[0], max_candidates=3)) == 3


def test_prompt_fits_and_is_deterministic():
    tok = build_tokenizer()
    big = Observation(
        "Click " + "x" * 500, "u", "\n".join(f'[{i}] button "B{i}"' for i in range(300))
    )
    ids = policy_prompt_ids(tok, big, [f"click({i})" for i in range(10)], 512)
    assert len(ids) <= 512 - 96
    text = decode(tok, ids)
    assert text.startswith("Task: Click x") and text.endswith("click(9)\nAction: ")
    assert "lines omitted" in text and '[0] button "B0"' in text and '[299] button "B299"' in text
    assert "click(5)" not in text  # only the last 4 actions
    assert ids == policy_prompt_ids(tok, big, [f"click({i})" for i in range(10)], 512)
    tiny = policy_prompt_ids(tok, big, ["click(1)"], 128)
    assert len(tiny) <= 128 - 96 + 16 and decode(tok, tiny).endswith("Action: ")
    small = policy_prompt_ids(tok, OBS[0], [], 1024)
    assert decode(tok, small) == OBS[0].render() + "\nHistory: none\nAction: "
    assert fit_tree("abc", 10, len) == "abc"
    assert len(fit_tree("x" * 100, 10, len)) <= 10


def _naive(model, prompt, cont):
    with torch.no_grad():
        lp = torch.log_softmax(model(torch.tensor([prompt + cont])).logits[0].float(), -1)
    return sum(float(lp[len(prompt) - 1 + i, t]) for i, t in enumerate(cont))


def test_packed_scoring_matches_naive(policy):
    model, tok = policy
    prompts = [policy_prompt_ids(tok, o, ["click(2)"], 200) for o in OBS]
    conts = [[action_ids(tok, a.to_text()) for a in candidate_actions(o)] for o in OBS]
    # max_positions small -> several rounds per prompt; different prompt lengths -> left padding
    scores = score_continuations(
        model, prompts, conts, max_positions=prompts[0].__len__() + 40, pad=0
    )
    for b in range(len(OBS)):
        for c in range(len(conts[b])):
            assert abs(float(scores[b][c]) - _naive(model, prompts[b], conts[b][c])) < 1e-3


def test_learner_packing_matches_naive(policy):
    model, tok = policy
    p0 = policy_prompt_ids(tok, OBS[0], [], 256)
    p1 = policy_prompt_ids(tok, OBS[1], ["click(4)"], 256)
    conts = [action_ids(tok, t) for t in ("click(1)", 'type(1, "Kiera")', "click(2)", 'stop("")')]
    rows = [(p0, conts[0]), (p1, conts[1]), (p0, conts[1]), (p0, conts[2]), (p1, conts[3])]
    lps = continuation_logprobs(model, rows, pad_id(tok), rows_per_forward=1)
    lps2 = continuation_logprobs(model, rows, pad_id(tok))
    for (p, c), lp, lp2 in zip(rows, lps, lps2, strict=True):
        assert lp.shape == (len(c),)
        assert abs(float(lp.sum().detach()) - _naive(model, p, c)) < 1e-3
        assert torch.allclose(lp, lp2, atol=1e-5)


def test_a_long_prompt_runs_once_and_its_candidates_in_rounds(policy, monkeypatch):
    """Candidates that do not fit one row beside their prompt (a long page): the prompt once into a
    cache, the candidates in rounds against it, with grad: the packed row's numbers and states."""
    model, tok = policy
    p0 = policy_prompt_ids(tok, OBS[0], [], 256)
    p1 = policy_prompt_ids(tok, OBS[1], ["click(4)"], 256)
    texts = ("click(1)", 'type(1, "Kiera")', "click(2)", 'stop("")', "click(12)")
    conts = [action_ids(tok, t) for t in texts]
    rows = [(p0, c) for c in conts] + [(p1, conts[0]), (p1, conts[3])]
    ref_h: dict = {}
    ref = continuation_logprobs(model, rows, pad_id(tok), hidden=ref_h)
    # room for the first prompt and 6 continuation tokens only: its 5 candidates go in rounds
    import models.lm.scoring as scoring

    calls, long_prompt = [], scoring._long_prompt
    monkeypatch.setattr(
        scoring, "_long_prompt", lambda *a, **k: (calls.append(len(a[1])), long_prompt(*a, **k))
    )
    h: dict = {}
    got = continuation_logprobs(model, rows, pad_id(tok), hidden=h, max_pos=len(p0) + 6)
    assert len(p0) in calls  # the long path ran for the first prompt
    for (p, c), a, b in zip(rows, got, ref, strict=True):
        assert a.shape == (len(c),) and torch.allclose(a, b, atol=1e-4), (a, b)
        assert abs(float(a.sum().detach()) - _naive(model, p, c)) < 1e-3
    for i in range(len(rows)):
        assert torch.allclose(h[i], ref_h[i], atol=1e-4)
    model.zero_grad()
    torch.stack([x.sum() for x in got]).sum().backward()
    grads = [q.grad for q in model.parameters() if q.grad is not None]
    assert grads and any(float(g.abs().sum()) > 0 for g in grads)
    model.zero_grad()


def test_act_batched(policy):
    model, tok = policy
    r = PolicyRunner(model, tok, CFG, seed=1)
    out = r.act(OBS, [[], ["click(4)"], []])
    assert len(out) == 3 and r.policy_version == 0
    for obs, (a, lp, n) in zip(OBS, out, strict=True):
        assert isinstance(a, Action) and parse_action(a.to_text()) == a
        assert a.to_text() in [c.to_text() for c in candidate_actions(obs)]
        assert n == len(action_ids(tok, a.to_text())) and lp < 0 and math.isfinite(lp)
    g1 = r.act(OBS, [[], [], []], greedy=True)
    g2 = r.act(OBS[1:2], [[]], greedy=True)
    assert g1 == r.act(OBS, [[], [], []], greedy=True)
    assert g2[0][0] == g1[1][0] and abs(g2[0][1] - g1[1][1]) < 1e-4
    assert r.act([], []) == []


def test_ratio_one_for_unchanged_model_and_gradient(policy):
    model, tok = policy
    r = PolicyRunner(model, tok, CFG, seed=3)
    trajs = []
    for k in range(4):
        steps, lps = policy_rollout(r, OBS[k % 3], 2)
        trajs.append(policy_trajectory(steps, "dream", "g", float(k % 2), lps))
    trajs.append(
        policy_trajectory([(OBS[0], 'type(1, "Kiera")'), (OBS[0], "click(2)")], "expert", "", 1.0)
    )
    # no logprobs -> skipped
    trajs.append(policy_trajectory([(OBS[1], "click(4)")], "real", "", 0.0))
    tc = TrainerConfig()
    model.zero_grad()
    loss, m = policy_batch_loss(model, tok, trajs, tc, CFG)
    assert (
        abs(m["ratio_mean"] - 1) < 1e-4
        and abs(m["ratio_min"] - 1) < 1e-4
        and abs(m["ratio_max"] - 1) < 1e-4
    )
    assert m["n_gspo"] == 4 and m["n_bc"] == 1 and m["n_skipped"] == 1 and m["clip_frac"] == 0.0
    assert m["adv_abs"] > 0 and m["bc_loss"] > 0
    loss.backward()
    full = [p.grad.clone() for p in model.parameters()]
    assert any(float(g.abs().sum()) > 0 for g in full)
    # chunked backward (gradient accumulation) gives the same gradient
    model.zero_grad()
    loss2, m2 = policy_batch_loss(model, tok, trajs, tc, CFG, backward=True, chunk_rows=2)
    assert abs(float(loss2) - float(loss.detach())) < 1e-4
    for g, p in zip(full, model.parameters(), strict=True):
        assert torch.allclose(g, p.grad, atol=1e-5)
    model.zero_grad()


def test_bc_step_raises_expert_likelihood():
    model, tok = make_model(Policy, CFG)
    traj = policy_trajectory(
        [(OBS[0], 'type(1, "Kiera")'), (OBS[0], "click(2)")], "expert", "", 1.0
    )
    rows = [(policy_prompt_ids(tok, OBS[0], [], 256), action_ids(tok, 'type(1, "Kiera")'))]
    before = float(continuation_logprobs(model, rows, pad_id(tok))[0].sum().detach())
    opt = torch.optim.AdamW(model.parameters(), lr=3e-3)
    for _ in range(5):
        opt.zero_grad()
        loss, m = policy_batch_loss(model, tok, [traj], TrainerConfig(), CFG)
        loss.backward()
        opt.step()
    assert float(continuation_logprobs(model, rows, pad_id(tok))[0].sum().detach()) > before + 1.0
    assert m["n_bc"] == 1 and m["n_gspo"] == 0


def test_shared_prefix_scoring_matches_naive(policy):
    from models.lm.scoring import prefix_groups

    model, tok = policy
    page = Observation(
        'Type "ab" in the box.',
        "u",
        '[4] button "OK"\n[5] link "Help"\n[6] textbox "Name"',
        focused=6,
    )
    hists = [[], ["click(4)"], ["click(4)", 'type(6, "ab")'], ["click(5)"]]
    prompts = [policy_prompt_ids(tok, page, h, 256) for h in hists] + [
        policy_prompt_ids(tok, OBS[1], [], 256)
    ]
    groups = prefix_groups(prompts)
    assert sorted(len(m) for _, m in groups) == [
        1,
        4,
    ]  # one page under four histories + another page
    conts = [
        [action_ids(tok, a.to_text()) for a in candidate_actions(o)] for o in [page] * 4 + [OBS[1]]
    ]
    stats: dict = {}
    scores = score_continuations(
        model, prompts, conts, max_positions=max(map(len, prompts)) + 60, pad=0, stats=stats
    )
    naive_tokens = sum(
        len(p) + sum(len(c) for c in cs) for p, cs in zip(prompts, conts, strict=True)
    )
    assert 0 < stats["tokens"] < naive_tokens  # small max_positions: many rounds, tails repeated
    roomy: dict = {}
    score_continuations(model, prompts, conts, max_positions=CFG.max_positions, pad=0, stats=roomy)
    assert roomy["tokens"] < 0.6 * naive_tokens, (roomy, naive_tokens)
    for b in range(len(prompts)):
        for c in range(len(conts[b])):
            assert abs(float(scores[b][c]) - _naive(model, prompts[b], conts[b][c])) < 1e-3
