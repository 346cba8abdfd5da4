import torch

from core.config import DreamConfig, ModelConfig, TrainerConfig
from core.spaces import Action
from models.dream.env import DreamEnv, dream_rollouts
from models.lm.saved import load_model, make_model
from models.policy.model import Policy
from models.policy.runner import PolicyRunner
from models.world_model.change import apply_change
from models.world_model.loss import world_model_batch_loss
from models.world_model.model import WorldModel
from models.world_model.outputs import Prediction, change_target
from models.world_model.runner import WorldModelRunner
from models.world_model.scores import balanced_accuracy, fidelity
from tests.factories import WM_A as A
from tests.factories import WM_A2 as A2
from tests.factories import WM_B as B
from tests.factories import WM_B2 as B2
from tests.factories import WM_CFG as CFG
from tests.factories import wm_transition


class FakeEmbedder:
    dim = 384

    def embed(self, texts):
        return torch.stack(
            [
                torch.randn(384, generator=torch.Generator().manual_seed(hash(t) % 2**31))
                for t in texts
            ]
        )


def test_change_target_format():
    t = change_target(A, B, 0.0, False)
    assert (
        t
        == 'why: 1 changed, 0 added, 0 removed\nreplace [1] [1] textbox "Name" value "Kiera"\nreward 0\ndone 0'
    )
    assert apply_change(A.tree, t, next_id=A.next_id) == B.tree
    t2 = change_target(A2, B2, 1.0, True)
    assert (
        t2.endswith("reward 1\ndone 1") and apply_change(A2.tree, t2, next_id=A2.next_id) == B2.tree
    )


def test_untrained_predict_is_safe_and_batched():
    model, tok = make_model(WorldModel, CFG)
    r = WorldModelRunner(model, tok, DreamConfig(max_change_tokens=24))
    preds = r.predict([A, A2], [Action.type(1, "Kiera"), "click(4)"])
    assert len(preds) == 2 and all(isinstance(p, Prediction) for p in preds)
    for p, o in zip(preds, [A, A2], strict=True):
        if not p.ok:
            assert p.next_obs.tree == o.tree and p.reward == 0.0 and not p.done and p.reason
    single = r.predict([A2], ["click(4)"])[0]
    assert single.text == preds[1].text  # left padding does not change the result


def test_overfit_two_transitions_then_exact_match(tmp_path):
    torch.manual_seed(0)
    model, tok = make_model(WorldModel, CFG)
    batch = [
        wm_transition(A, 'type(1, "Kiera")', B, 0.0, False, 0),
        wm_transition(A2, "click(4)", B2, 1.0, True, 1),
    ]
    opt = torch.optim.AdamW(model.parameters(), lr=3e-3)
    tc = TrainerConfig(infonce_weight=0.1)
    for _ in range(120):
        opt.zero_grad()
        loss, m = world_model_batch_loss(model, tok, batch, tc, embedder=FakeEmbedder())
        loss.backward()
        opt.step()
    assert m["lm_loss"] < 0.05 and m["infonce"] > 0 and model.page_head.weight.grad is not None
    r = WorldModelRunner(model, tok, DreamConfig(max_change_tokens=100))
    preds = r.predict([A, A2], ['type(1, "Kiera")', "click(4)"])
    assert all(p.ok for p in preds), [p.reason for p in preds]
    f = fidelity(preds, [B, B2.to_dict()], [0.0, 1.0], [False, True])
    assert f["exact_match"] == 1.0 and f["change_f1"] == 1.0 and f["reward_bal_acc"] == 1.0
    assert (
        f["done_bal_acc"] == 1.0
        and f["baseline_exact_match"] == 0.0
        and f["baseline_done_bal_acc"] == 0.5
    )
    assert preds[0].next_obs.focused == 1 and preds[1].next_obs.next_id == 7
    # save / load keeps the world model and its page head
    model.save_pretrained(tmp_path)
    tok.save_pretrained(tmp_path)
    m2, t2 = load_model(WorldModel, str(tmp_path))
    assert torch.equal(m2.page_head.weight, model.page_head.weight)
    assert (
        WorldModelRunner(m2, t2, DreamConfig(max_change_tokens=100))
        .predict([A], ['type(1, "Kiera")'])[0]
        .next_obs.tree
        == B.tree
    )

    # dreams with the trained world model
    env = DreamEnv(r, max_steps=2)
    obs, info = env.reset(A2, "t", 0)
    assert obs is A2 and info["dream"]
    obs, rew, term, trunc, info = env.step("click(4)")
    assert obs.tree == B2.tree and rew == 1.0 and term and not trunc and info["ok"]

    pol, ptok = make_model(Policy, CFG)
    pr = PolicyRunner(pol, ptok, CFG, seed=0)
    ros = dream_rollouts(pr, r, [A, A2], group_size=3, horizon=2)
    assert len(ros) == 6 and len({ro.group_id for ro in ros}) == 2
    assert {ro.group_id for ro in ros[:3]} == {ros[0].group_id}
    for ro in ros:
        assert 1 <= len(ro) <= 2 and ro.steps is ro
        for k, st in enumerate(ro):
            assert set(st) >= {
                "obs",
                "action",
                "next_obs",
                "reward",
                "done",
                "behaviour_logprob",
                "ntokens",
            }
            assert st["behaviour_logprob"] < 0 and st["ntokens"] > 1
            assert k == len(ro) - 1 or not st["done"]
        assert ro.reward == ro[-1]["reward"]


def test_balanced_accuracy_and_fidelity_baseline():
    assert balanced_accuracy([True, False, False, False], [True, False, False, True]) == 0.75
    assert balanced_accuracy([], []) == 1.0
    same = Prediction(A, 0.0, False, True, "", "why: nothing changes\nsame", A.tree)
    f = fidelity([same], [A], [0.0], [False])
    assert f["exact_match"] == 1.0 == f["baseline_exact_match"] and f["ok_rate"] == 1.0


def test_decoding_loop_matches_hf_generate_and_cache_ops():
    from models.lm.tokenizer import decode, eos_id
    from models.world_model.decoding import PreallocatedLayer

    model, tok = make_model(
        WorldModel, ModelConfig(layers=2, d_model=32, heads=2, max_positions=256)
    )
    r = WorldModelRunner(model, tok, None, max_positions=256, max_change_tokens=40)
    prompts = [list(range(3, 3 + n)) for n in (50, 80, 20)]
    P = 80
    ids = torch.zeros(3, P, dtype=torch.long)
    att = torch.zeros(3, P, dtype=torch.long)
    for b, p in enumerate(prompts):
        ids[b, P - len(p) :], att[b, P - len(p) :] = torch.tensor(p), 1
    out = model.lm.generate(
        input_ids=ids,
        attention_mask=att,
        max_new_tokens=40,
        do_sample=False,
        eos_token_id=eos_id(tok),
        pad_token_id=0,
    )
    ref = [decode(tok, row[: row.index(1)] if 1 in row else row) for row in out[:, P:].tolist()]
    assert r.generate_texts(prompts) == ref
    assert [r.generate_texts([p])[0] for p in prompts] == ref  # batch-independent (left padding)
    base = list(
        range(3, 83)
    )  # shared prefixes (prefilled once per group), tails of several lengths
    shared = [
        base + [90, 91],
        base + [92],
        base[:60] + [99, 98, 97],
        base + [90, 91, 93],
        list(range(5, 40)),
    ]
    assert r.generate_texts(shared) == [r.generate_texts([p])[0] for p in shared]
    # the preallocated layer: in-place writes, growth, crop and row selection
    layer = PreallocatedLayer(2)
    k = torch.randn(3, 2, 3, 4)
    keys, _ = layer.update(k, k)
    keys, _ = layer.update(k[..., :1, :], k[..., :1, :])
    assert layer.get_seq_length() == 4 and torch.equal(keys, torch.cat([k, k[..., :1, :]], -2))
    layer.crop(-1)
    layer.batch_select_indices(torch.tensor([2, 0]))
    assert torch.equal(layer.keys, k[[2, 0]])


def test_decoding_drops_finished_rows_without_changing_outputs(monkeypatch):
    import models.world_model.decoding as D
    import models.world_model.runner as W

    model, tok = make_model(
        WorldModel, ModelConfig(layers=2, d_model=32, heads=2, max_positions=256)
    )
    r = WorldModelRunner(model, tok, None, max_positions=256, max_change_tokens=40)
    g = torch.Generator().manual_seed(0)
    cand = [
        torch.randint(3, 259, (int(n),), generator=g).tolist()
        for n in torch.randint(20, 90, (8,), generator=g)
    ]
    ids = [
        model.lm.generate(
            input_ids=torch.tensor([p]),
            max_new_tokens=25,
            do_sample=False,
            eos_token_id=None,
            pad_token_id=0,
        )[0, len(p) :].tolist()
        for p in cand
    ]
    a = next(i for i in range(8) if any(ids[i][3] not in ids[j] for j in range(8) if j != i))
    b = next(j for j in range(8) if j != a and ids[a][3] not in ids[j])
    monkeypatch.setattr(W, "eos_id", lambda _tok: ids[a][3])  # rows of prompt a stop after 3 tokens
    sizes = []
    orig = D.PreallocatedLayer.batch_select_indices
    monkeypatch.setattr(
        D.PreallocatedLayer,
        "batch_select_indices",
        lambda self, i: (sizes.append(len(i)), orig(self, i)),
    )
    prompts = [cand[a]] * 4 + [cand[b]] * 2 + [cand[a] + [5]]
    batched = r.generate_texts(prompts)
    assert len(prompts) > min(sizes)  # finished rows were dropped
    assert batched == [r.generate_texts([p])[0] for p in prompts]
