"""The reranking decoder of the world model: proposals and scoring."""

from core.config import DreamConfig, ModelConfig
from core.spaces import Observation, parse_action
from models.lm.saved import make_model
from models.world_model.change import apply_change, parse_model_output
from models.world_model.model import WorldModel
from models.world_model.outputs import TRAILERS, candidate_outputs
from models.world_model.proposals import candidate_trees
from models.world_model.runner import WorldModelRunner

PAGE = Observation(
    "Tick a, type hi, pick B.",
    "u",
    '[1] checkbox "a"\n[2] textbox value="x"\n[3] combobox value="A"\n  option "A" selected\n  option "B"',
    next_id=4,
)


def test_candidate_trees_cover_the_common_changes():
    ticked = candidate_trees(PAGE, parse_action("click(1)"))
    assert ticked[0] == PAGE.tree and "" in ticked
    assert PAGE.tree.replace('checkbox "a"', 'checkbox "a" checked') in ticked
    typed = candidate_trees(PAGE, parse_action('type(2, "hi")'))
    assert PAGE.tree.replace('value="x"', 'value="hi"') in typed
    picked = candidate_trees(PAGE, parse_action('select(3, "B")'))
    want = '[1] checkbox "a"\n[2] textbox value="x"\n[3] combobox value="B"\n  option "A"\n  option "B" selected'
    assert want in picked
    assert candidate_trees(PAGE, parse_action('scroll("down")')) == [PAGE.tree, ""]
    assert candidate_trees(PAGE, None) == [PAGE.tree, ""]
    assert len(set(ticked)) == len(ticked)


def test_candidate_trees_for_password_boxes_and_tabs():
    page = Observation(
        "x",
        "u",
        '[1] tablist\n  [2] tab "A" expanded selected\n  [3] tab "B" collapsed\n'
        '[4] textbox type="password"',
        next_id=5,
    )
    tab = '[1] tablist\n  [2] tab "A" collapsed\n  [3] tab "B" expanded selected\n[4] textbox type="password"'
    assert tab in candidate_trees(page, parse_action("click(3)"))
    typed = '[1] tablist\n  [2] tab "A" expanded selected\n  [3] tab "B" collapsed\n[4] textbox value="US" type="password"'
    assert typed in candidate_trees(page, parse_action('type(4, "US")'))


def test_candidate_outputs_parse_and_apply_to_their_trees():
    a = parse_action("click(1)")
    outs = candidate_outputs(PAGE, a)
    assert len(outs) == len(candidate_trees(PAGE, a)) * len(TRAILERS)
    applied = set()
    for text in outs:
        change, reward, done, ok, _ = parse_model_output(text, tree=PAGE.tree, next_id=PAGE.next_id)
        assert ok and (reward, done) in TRAILERS
        applied.add(apply_change(PAGE.tree, change, next_id=PAGE.next_id))
    assert applied == set(candidate_trees(PAGE, a))
    good = "why: nothing changes\nsame\nreward 1\ndone 1"
    assert candidate_outputs(PAGE, a, good)[0] == good  # a parsing generated text is a candidate
    assert "garbage" not in candidate_outputs(PAGE, a, "garbage")  # a rejected one is not


def test_rerank_predictions_are_valid_candidates():
    model, tok = make_model(
        WorldModel, ModelConfig(layers=2, d_model=64, heads=2, max_positions=320)
    )
    r = WorldModelRunner(model, tok, DreamConfig(max_change_tokens=16))
    r.decode = "rerank"
    acts = [parse_action("click(1)"), parse_action('type(2, "hi")')]
    preds = r.predict([PAGE, PAGE], acts)
    for p, a in zip(preds, acts, strict=True):
        assert (
            p.ok and p.next_obs.tree in candidate_trees(PAGE, a) and (p.reward, p.done) in TRAILERS
        )
