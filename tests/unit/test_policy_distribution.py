"""The probability trained is the probability sampled: pi_T(a|s) = softmax over the page's candidate
actions of score/T, recorded by the runner (with the candidate-set hash and T) and recomputed by the
learner's real path (``policy_batch_loss``)."""

from __future__ import annotations

import math

import pytest
import torch

from collectors.agents import _norm
from core.config import TrainerConfig
from core.spaces import Action, Observation
from models.lm.prompts import action_ids, policy_prompt_ids
from models.lm.saved import make_model
from models.lm.scoring import continuation_logprobs, score_continuations
from models.lm.tokenizer import pad_id
from models.policy.candidates import candidates_hash, policy_candidates
from models.policy.decisions import trajectory_decisions
from models.policy.log_pi import candidate_logprobs
from models.policy.loss import policy_batch_loss
from models.policy.model import Policy
from models.policy.runner import PolicyRunner
from streams import records
from streams.records import Trajectory, Transition
from tests.factories import POLICY_CFG as CFG
from tests.factories import POLICY_OBS as OBS
from tests.factories import POLICY_PAGE as PAGE
from tests.factories import collect_trajectories, dream_trajectories, wire_transition


@pytest.fixture(scope="module")
def policy():
    torch.manual_seed(0)
    return make_model(Policy, CFG)


def test_candidate_set_is_one_function_and_hashed(policy):
    _, tok = policy
    p = policy_prompt_ids(tok, PAGE, [], CFG.max_positions)
    acts, ids = policy_candidates(tok, PAGE, p, CFG.max_positions)
    texts = [a.to_text() for a in acts]
    assert (
        'type(6, "ab")' in texts
        and 'select(7, "M")' in texts
        and ids == [action_ids(tok, t) for t in texts]
    )
    h = candidates_hash(texts)
    assert len(h) == 16 and h == candidates_hash(list(texts)) and h != candidates_hash(texts[:-1])
    # no room after the prompt: only stop("")
    tight, _ = policy_candidates(tok, PAGE, p, len(p) + 1)
    assert [a.to_text() for a in tight] == ['stop("")']


def test_recorded_logprob_is_log_pi_T_over_the_candidates(policy):
    model, tok = policy
    r = PolicyRunner(model, tok, CFG, seed=5)
    for T in (0.5, 1.0, 2.0):
        a, lp, nt, info = r.act_info([PAGE], [["click(4)"]], temperature=T)[0]
        p = policy_prompt_ids(tok, PAGE, ["click(4)"], CFG.max_positions)
        acts, ids = policy_candidates(tok, PAGE, p, CFG.max_positions)
        s = score_continuations(model, [p], [ids], CFG.max_positions, 0)[0]
        k = [x.to_text() for x in acts].index(a.to_text())
        assert abs(lp - float(torch.log_softmax(s / T, -1)[k])) < 1e-5
        assert info == {
            "candidates_hash": candidates_hash([x.to_text() for x in acts]),
            "temperature": T,
            "n_candidates": len(acts),
        }
        assert nt == len(ids[k])
    # the probabilities of one state sum to 1 (it is a distribution over the candidates)
    assert abs(float(candidate_logprobs(s, 0.7).exp().sum()) - 1) < 1e-5
    # greedy: the argmax; T <= 0 records log pi_1, T > 0 records log pi_T
    g0 = r.act_info([PAGE], [[]], temperature=0.0)[0]
    g1 = r.act_info([PAGE], [[]], temperature=0.5, greedy=True)[0]
    assert (
        g0[0] == g1[0]
        and g0[3]["temperature"] == 1.0
        and g1[3]["temperature"] == 0.5
        and g1[1] > g0[1] - 1e-6
    )
    # act(): the 3-tuple view of act_info
    three = r.act([PAGE, OBS[1]], [[], []], temperature=0.0)
    assert len(three) == 2 and len(three[0]) == 3 and three[0] == g0[:3]


def test_on_policy_log_ratio_is_zero_through_the_learner(policy):
    """Act with the real runner (collector-style and batched dream-style), learn with the real path:
    every trajectory's per-decision log ratio is 0 (the learner uses each record's own T)."""
    model, tok = policy
    r = PolicyRunner(model, tok, CFG, seed=11)
    trajs = (
        collect_trajectories(r, T=0.7)
        + collect_trajectories(r, T=0.0, greedy=True, G=2)
        + dream_trajectories(r, T=1.3)
    )
    tc = TrainerConfig()
    model.zero_grad()
    loss, m = policy_batch_loss(model, tok, trajs, tc, CFG)
    assert m["n_gspo"] == len(trajs) and len(m["log_ratios"]) == len(trajs)
    assert max(abs(x) for x in m["log_ratios"]) < 1e-4, m["log_ratios"]
    assert m["cand_mismatch"] == 0 and m["cand_missing"] == 0 and m["cand_unhashed"] == 0
    assert m["clip_frac"] == 0.0 and m["adv_abs"] > 0 and m["cand_per_step"] > 5
    # a group's shared first page is scored once
    n_steps = sum(len(t.transitions) for t in trajs)
    assert m["cand_rows"] < m["cand_per_step"] * n_steps
    loss.backward()
    full = [p.grad.clone() for p in model.parameters()]
    assert any(float(g.abs().sum()) > 0 for g in full)
    # micro-batches: the same gradient and log ratios
    model.zero_grad()
    loss2, m2 = policy_batch_loss(model, tok, trajs, tc, CFG, backward=True, chunk_rows=4)
    assert abs(float(loss2) - float(loss.detach())) < 1e-5
    assert max(abs(a - b) for a, b in zip(m["log_ratios"], m2["log_ratios"], strict=True)) < 1e-5
    for g, p in zip(full, model.parameters(), strict=True):
        assert torch.allclose(g, p.grad, atol=1e-5)
    model.zero_grad()
    # a record without T is read at trainer.policy_temperature: right only if that is the T it was drawn with
    hot = collect_trajectories(r, T=3.0, G=2)
    for t in hot:
        for d in t.transitions:
            d["info"].pop("temperature", None)
    _, m3 = policy_batch_loss(model, tok, hot, TrainerConfig(policy_temperature=3.0), CFG)
    assert max(abs(x) for x in m3["log_ratios"]) < 1e-4
    _, m4 = policy_batch_loss(model, tok, hot, TrainerConfig(policy_temperature=1.0), CFG)
    assert max(abs(x) for x in m4["log_ratios"]) > 1e-2, m4["log_ratios"]


def test_changed_candidate_set_is_counted_and_still_trained(policy):
    model, tok = policy
    r = PolicyRunner(model, tok, CFG, seed=2)
    trajs = collect_trajectories(r, G=2, H=2, T=1.0)[:2]
    trajs[0].transitions[0]["candidates_hash"] = "0" * 16  # acted on another set
    trajs[1].transitions[1]["action"] = (
        'type(1, "not a candidate")'  # and an action outside the set
    )
    trajs[1].transitions[1]["candidates_hash"] = ""
    loss, m = policy_batch_loss(model, tok, trajs, TrainerConfig(), CFG)
    assert m["cand_mismatch"] == 1 and m["cand_missing"] == 1 and m["cand_unhashed"] == 1
    assert m["n_gspo"] == 2 and math.isfinite(float(loss.detach()))
    assert (
        abs(m["log_ratios"][0]) < 1e-4 and m["log_ratios"][1] < -1e-3
    )  # the missing action is unlikely


def test_bc_is_cross_entropy_over_the_candidates(policy):
    model, tok = policy
    steps = [
        (OBS[0], 'type(1, "Kiera")'),
        (OBS[0], 'type(1, "nope")'),
    ]  # the second is no candidate
    ts = [
        wire_transition(o, a, i, i == 1, "", "x", 1.0, None, 0, {}, source="expert")
        for i, (o, a) in enumerate(steps)
    ]
    traj = Trajectory.from_transitions(ts)
    loss, m = policy_batch_loss(model, tok, [traj], TrainerConfig(policy_temperature=0.8), CFG)
    assert m["n_bc"] == 1 and m["bc_not_candidate"] == 1
    d = trajectory_decisions(tok, traj.steps(), CFG.max_positions, 0.8)
    with torch.no_grad():
        s = score_continuations(model, [d[0].prompt], [d[0].cand_ids], CFG.max_positions, 0)[0]
        ce = -float(candidate_logprobs(s, 0.8)[d[0].index])
        nll = -float(
            continuation_logprobs(model, [(d[1].prompt, d[1].action_ids)], pad_id(tok))[0].mean()
        )
    assert d[0].index >= 0 and d[1].index == -1
    assert abs(m["bc_loss"] - (ce + nll) / 2) < 1e-4, (m["bc_loss"], ce, nll)


def test_bc_raises_pi_of_the_expert_action():
    model, tok = make_model(Policy, CFG)
    ts = [
        wire_transition(
            PAGE, 'type(6, "ab")', 0, False, "", "x", 0.0, None, 0, {}, source="expert"
        ),
        wire_transition(PAGE, "click(4)", 1, True, "", "x", 1.0, None, 0, {}, source="expert"),
    ]
    traj = Trajectory.from_transitions(ts)
    d = trajectory_decisions(tok, traj.steps(), CFG.max_positions)

    def log_pi() -> float:
        with torch.no_grad():
            s = score_continuations(model, [d[0].prompt], [d[0].cand_ids], CFG.max_positions, 0)[0]
        return float(candidate_logprobs(s, 1.0)[d[0].index])

    before = log_pi()
    opt = torch.optim.AdamW(model.parameters(), lr=3e-3)
    for _ in range(4):
        opt.zero_grad()
        loss, m = policy_batch_loss(model, tok, [traj], TrainerConfig(), CFG)
        loss.backward()
        opt.step()
    assert m["bc_not_candidate"] == 0 and log_pi() > before + 0.5


def test_collector_carries_hash_and_temperature():
    a = Action.click(3)
    assert _norm(a) == (a, None, 0, {})
    assert _norm((a, None, 0)) == (a, None, 0, {})
    assert _norm((a, -1.5, 4, {"candidates_hash": "ab", "temperature": 0.7})) == (
        a,
        -1.5,
        4,
        {"candidates_hash": "ab", "temperature": 0.7},
    )


def test_transition_candidates_hash_is_optional():
    d = records.encode(
        Transition(
            run_id="r",
            episode_id="e",
            step=0,
            task="t",
            seed=0,
            source="real",
            policy_version=0,
            world_model_version=0,
            obs=OBS[1].to_dict(),
            action="click(4)",
            next_obs=OBS[1].to_dict(),
            reward=0.0,
            done=True,
            candidates_hash="abc",
        )
    )
    assert records.decode(d).candidates_hash == "abc"
    import json

    raw = json.loads(d)
    raw.pop("candidates_hash")
    assert records.decode(json.dumps(raw)).candidates_hash == ""
    raw["candidates_hash"] = 5
    with pytest.raises(records.RecordError):
        records.decode(json.dumps(raw))


def test_candidate_texts_cover_what_the_experts_type():
    from models.policy.candidates import candidate_actions, instruction_texts, page_texts

    t = instruction_texts(
        "{'utterance': \"Forward Sherline's e-mail to Fernandina.\", 'fields': {'task': 'forward', "
        "'by': 'Sherline', 'to': 'Fernandina'}}"
    )
    assert t[:2] == ["Sherline", "Fernandina"] and "forward" not in t
    assert "Jillian" in instruction_texts(
        "Find the email by Fernandina and forward that email to Jillian."
    )
    assert {"Holt", "1991"} <= set(
        instruction_texts("Search for adventure movies directed by Holt from year 1991.")
    )
    assert "2011-01-28" in instruction_texts("Enter 01/28/2011 as the date and hit submit.")
    assert "23:17" in instruction_texts("Enter 11:17 PM as the time and press submit.")
    assert "06:09" in instruction_texts("Enter 6:09 AM as the time and press submit.")
    assert "tula" in instruction_texts(
        'Type "TULA" in all lower case letters in the text input and press Submit.'
    )
    assert "-8" in instruction_texts("Select -8 with the spinner and hit Submit.")
    assert {str(i) for i in range(10)} <= set(
        instruction_texts("Guess the number between 0-9 and press Submit.")
    )

    def page(instr: str, tree: str) -> list[str]:
        return page_texts(Observation(instr, "u", tree))

    assert page(
        "Copy the text in the textarea below, paste it into the textbox.",
        '[1] textbox value="Leo odio. Neque, " multiline\n[2] textbox',
    ) == ["Leo odio. Neque, "]
    assert page(
        'Enter an item that starts with "Ber".',
        '[2] textbox "Tags:" value="Ber"\n[4] listitem "Bermuda" '
        'clickable\n[5] listitem "Chad" clickable',
    ) == ["Bermuda"]
    table = (
        '[1] row\n  [2] cell "Gender"\n  [3] cell "Male"\n[4] row\n  [5] cell "Year of Birth"\n  [6] cell "1970"\n'
        '[7] label "Gender:"\n[8] textbox'
    )
    assert page("Enter the value of Year of Birth into the text field.", table) == ["Male", "1970"]
    assert page(
        "Find the 3rd word in the paragraph.", '[1] text "Non. Duis duis ac augue."\n[2] textbox'
    ) == ["duis"]
    assert page("Type the text below into the text field.", '[1] text "T E C"\n[2] textbox') == [
        "TEC"
    ]
    assert page("Solve the math problem.", '[1] text "1 + 4 ="\n[2] textbox') == ["5"]
    assert page("Solve for x.", '[1] text "x - 1 = 43"\n[2] textbox') == ["44"]
    assert page("Solve for x.", '[1] text "8 + x = 55"\n[2] textbox') == ["47"]
    assert page("Solve for x.", '[1] text "20 - x = 5"\n[2] text "x * 3 = 12"') == ["15", "4"]
    # options without an id (a native select) are candidates too; Tab where something is typeable
    obs = Observation(
        "Select Rosemaria from the list and click Submit.",
        "u",
        '[1] combobox value="Ida"\n  option "Ida" selected\n  option "Rosemaria"\n[2] button "Submit"',
    )
    texts = [a.to_text() for a in candidate_actions(obs)]
    assert (
        'select(1, "Rosemaria")' in texts
        and 'select(1, "Ida")' in texts
        and 'press("Tab")' in texts
    )
    assert 'press("Tab")' not in [a.to_text() for a in candidate_actions(OBS[1])]
