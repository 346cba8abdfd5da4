"""``dynaweb eval world-model``: fidelity of a world-model checkpoint on held-out real transitions.

The data: the run's eval topic (``topics.world_model_eval``, which the stream
worker fills with whole episodes chosen by ``streams.records.heldout(episode_id)``;
the trainer never trains on it), read from the beginning up to a sentinel
(``streams.kafka.read_until_sentinel``), or a JSONL file of transitions
(``--data``; ``--split heldout`` keeps only the episodes the worker would hold
out, so the split is by episode, never by step).  Dreamed transitions are
ignored.  Figures (``models.world_model.scores.fidelity``): exact match of the
predicted next page, line-level F1 of the change, balanced accuracy of
reward > 0 and of done, the share of outputs that parsed (ok_rate) -- and the
same figures for the trivial "nothing changes" baseline (page unchanged,
reward 0, not done) side by side.  Greedy decoding, or with ``--decode rerank``
the generated text and the proposals of ``models.world_model.outputs.candidate_outputs``
(unchanged / emptied page, the acted-on line with a toggled state or the typed
value, each with every reward/done trailer) scored by the model, the most
likely kept (default: ``dream.wm_decode``, what dreams use).  Reward and done
are what ``WorldModelRunner.predict`` returns: the reward/done heads once
trained (``models.world_model.model.heads_trained``), else the text's lines; the
result says which (``reward_source``).

``--checkpoint`` is a version number, ``latest``, or a local HF directory
(``evaluation.eval.sources``).  It prints a table (nothing but the JSON with
``--json``) and one JSON object on the last line.
"""

from __future__ import annotations

import json
import time
from typing import Any

from core.config import Config
from core.spaces import Observation, parse_action
from evaluation.eval.sources import heldout_transitions, load_checkpoint, read_jsonl, read_topic


def predict_all(runner: Any, transitions: list, batch: int = 16) -> list:
    """One prediction per transition (its real page and action), in batches."""
    preds = []
    for i in range(0, len(transitions), batch):
        chunk = transitions[i : i + batch]
        preds += runner.predict(
            [Observation.from_dict(t.obs) for t in chunk], [_action(t.action) for t in chunk]
        )
    return preds


def world_model_fidelity(
    runner: Any, transitions: list, batch: int = 16, stage1: bool = False
) -> dict:
    """``models.world_model.scores.fidelity`` on ``transitions``; with ``stage1`` also the stage-1 figures,
    the open-loop replay and the targets (``evaluation.eval.world_model_targets``) under ``stage1``."""
    from models.world_model.scores import fidelity

    preds = predict_all(runner, transitions, batch)
    fid = fidelity(
        preds,
        [t.next_obs for t in transitions],
        [float(t.reward) for t in transitions],
        [bool(t.done) for t in transitions],
    )
    fid["episodes"] = len({t.episode_id for t in transitions})
    if stage1:
        from evaluation.eval.world_model_targets import (
            check_targets,
            open_loop_replay,
            stage1_figures,
        )

        st = {**stage1_figures(preds, transitions), **open_loop_replay(runner, transitions, batch)}
        st["targets"] = check_targets(st)
        fid["stage1"] = st
    return fid


def _action(text: str) -> Any:
    try:
        return parse_action(text)
    except ValueError:
        return text


def eval_world_model(
    cfg: Config,
    checkpoint: str | None,
    data: str | None = None,
    split: str = "heldout",
    limit: int = 0,
    timeout: float = 60.0,
    decode: str | None = None,
    stage1: bool = True,
) -> dict:
    from models.world_model.runner import WorldModelRunner
    from streams.topics import Topics

    if data:
        trans = read_jsonl(data)
        source = data
        if split == "heldout":
            trans = heldout_transitions(trans, cfg.stream.heldout_fraction)
    else:
        topic = Topics(cfg.run_id, cfg.kafka.partitions).world_model_eval
        trans = read_topic(cfg, topic, timeout)
        source = topic  # the whole topic is held out (by episode) already
    seen, uniq = set(), []
    for t in trans:
        if t.source != "dream" and t.key not in seen:
            seen.add(t.key)
            uniq.append(t)
    uniq.sort(key=lambda t: (t.episode_id, t.step))
    if limit:
        uniq = uniq[:limit]
    if not uniq:
        raise ValueError(
            f"no held-out real transitions in {source}"
            + (
                " (try --split all if the file is held out already)"
                if data and split == "heldout"
                else ""
            )
        )
    ck = load_checkpoint(cfg, "world_model", checkpoint)
    try:
        runner = WorldModelRunner(
            ck.model,
            ck.tokenizer,
            cfg.dream,
            max_positions=int(ck.model.config.max_position_embeddings),
            world_model_version=ck.version or 0,
        )
        decode = decode or runner.decode  # default: dream.wm_decode
        from models.world_model.runner import DECODES

        if decode not in DECODES:
            raise ValueError(f"--decode must be one of {DECODES}, got {decode!r}")
        runner.decode = decode

        reward_source = "heads" if ck.model.heads_trained() else "text"
        t0 = time.time()
        fid = world_model_fidelity(runner, uniq, stage1=stage1)
        fid["seconds"] = round(time.time() - t0, 2)
    finally:
        ck.close()
    return {
        "kind": "world_model",
        "checkpoint": ck.version,
        "checkpoint_source": ck.source,
        "data": source,
        "split": split if data else "heldout-topic",
        "decode": decode,
        "reward_source": reward_source,
        **fid,
    }


def format_world_model(res: dict) -> str:
    lines = [
        f"world model {res['checkpoint_source']} on {res['n']} held-out transitions "
        f"({res['episodes']} episodes, {res['data']}), {res.get('decode', 'greedy')} decoding, reward/done "
        f"from {res.get('reward_source', 'text')}",
        f"{'metric':16s} {'model':>8s} {'nothing-changes':>16s}",
    ]
    for k in ("exact_match", "change_f1", "reward_bal_acc", "done_bal_acc"):
        lines.append(f"{k:16s} {res[k]:8.3f} {res['baseline_' + k]:16.3f}")
    lines.append(f"{'ok_rate':16s} {res['ok_rate']:8.3f} {'-':>16s}")
    st = res.get("stage1")
    if st:
        from evaluation.eval.world_model_targets import format_targets

        lines.append(
            f"{st['terminal_steps']} terminal steps ({st['terminal_successes']} successes), "
            f"{st['changed_steps']} steps that change the page, {st['replay_episodes']} whole "
            f"episodes dreamed open-loop ({st['replay_real_successes']} real successes)"
        )
        lines += format_targets(st["targets"])
    return "\n".join(lines)


def main(args: Any, cfg: Config) -> int:
    timeout = float(getattr(args, "timeout", 60.0) or 60.0)
    res = eval_world_model(
        cfg,
        args.checkpoint,
        getattr(args, "data", None),
        getattr(args, "split", "heldout"),
        int(getattr(args, "limit", 0) or 0),
        timeout,
        getattr(args, "decode", None),
    )
    if not args.json:
        print(format_world_model(res))
    print(json.dumps(res, default=str))
    return 0
