"""The sub-commands of ``dynaweb`` and their options, one function per command family
(``FAMILIES``, in the order ``dynaweb --help`` lists them), and the options several commands
share (``--json``, ``--no-stack``, ``--prometheus``, ``--md``).  ``infra.cli`` builds the parser
from them; ``infra.commands`` runs each command."""

from __future__ import annotations

import argparse
from collections.abc import Callable

from infra.study_configs import STUDY_CONFIGS

SUMMARY_JSON = "only the JSON summary (always the last line)"


def _json_flag(p: argparse.ArgumentParser, help: str | None = None) -> None:
    """``--json``: the command's result as JSON (``help`` says where it is printed)."""
    p.add_argument("--json", action="store_true", help=help)


def _no_stack_flag(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "--no-stack", action="store_true", help="use already running / external services"
    )


def _prometheus_option(p: argparse.ArgumentParser) -> None:
    p.add_argument("--prometheus", help="Prometheus URL (default: the embedded stack's)")


def _read_only_outputs(p: argparse.ArgumentParser) -> None:
    """``--md`` and ``--json`` of the commands that read a run's finished cells."""
    p.add_argument("--md", help="also write the tables as Markdown to this file")
    _json_flag(p, "print the result as JSON on the last line")


# ``add(name, help)``: a new sub-command parser with the global options
AddCommand = Callable[[str, str], argparse.ArgumentParser]


def _stack_commands(add: AddCommand) -> None:
    """``infra`` and ``up``: the embedded stack, alone or with one of each component."""
    p = add(
        "infra", "start, stop or inspect the embedded stack (S3, broker, task server, Prometheus)"
    )
    p.add_argument("action", choices=["up", "down", "status"])
    p.add_argument(
        "--only",
        nargs="*",
        help="subset of services: s3 broker taskserver prometheus shop (the shop starts only "
        "when named or with stack.shop=true)",
    )
    _json_flag(p)

    p = add(
        "chaos",
        "inject faults on a schedule into a running `dynaweb up` (same --home/--run-id) and "
        "report recovery, memory, restarts, records acknowledged vs found (docs/reliability.md)",
    )
    p.add_argument("--duration", type=float, default=3600, help="seconds to run (default 3600)")
    p.add_argument("--every", type=float, default=300, help="seconds between faults")
    p.add_argument(
        "--outage", type=float, default=60, help="seconds a broker/S3/Prometheus outage lasts"
    )
    p.add_argument("--recovery", type=float, default=60, help="bound on each fault's recovery (s)")
    p.add_argument(
        "--max-checkpoint-gap",
        type=float,
        default=600,
        help="longest time without a new trainer version for the run to pass (s)",
    )
    p.add_argument(
        "--read-timeout",
        type=float,
        default=1800,
        help="bound on each final read from the first record (s); `up` must outlive the reads",
    )
    p.add_argument(
        "--warmup", type=float, default=600, help="seconds to wait for every component's progress"
    )
    p.add_argument(
        "--faults", help="comma-separated, in order (default: all, see docs/reliability.md)"
    )
    p.add_argument("--report", help="also write the report as JSON to this file")
    _json_flag(p, "print the report as one JSON line at the end")

    p = add("up", "start the stack and one of each component; show live progress")
    p.add_argument("--duration", type=float, default=0, help="seconds to run (0 = until Ctrl-C)")
    _no_stack_flag(p)
    _json_flag(p, "print a JSON summary on the last line at exit")


def _component_commands(add: AddCommand) -> None:
    """``collect``, ``stream-worker``, ``train``, ``dream``: the long-running components."""
    p = add("collect", "run a Playwright collector (joins a running system)")
    p.add_argument("--tasks", help="comma separated task names (default: config)")
    p.add_argument("--policy", choices=["expert", "latest", "random", "perturbed"], help="who acts")
    p.add_argument("--contexts", type=int, help="browser contexts (one page each)")
    p.add_argument("--max-episodes", type=int, help="stop after N episodes")
    p.add_argument("--id", dest="collector_id", help="collector id (default host-pid)")

    add("stream-worker", "run the Faust stream worker (validation, assembly, hybrid mixing)")

    p = add("train", "run the DeepSpeed trainer (policy + world model)")
    p.add_argument("--max-steps", type=int, help="stop after N policy steps")
    p.add_argument(
        "--ranks",
        type=int,
        metavar="N",
        help="data-parallel ranks on this host (default trainer.ranks, 1): each trains its share "
        "of every batch, rank 0 reads the topics and writes the checkpoints; a rank that dies "
        "stops the group (exit 1), which `dynaweb up` restarts as one component",
    )
    p.add_argument(
        "--linger",
        type=float,
        default=0.0,
        metavar="S",
        help="after --max-steps, keep serving /metrics for up to S seconds (until stopped), "
        "so a controller reads the final counters",
    )

    add("dream", "run a dream generator (policy rolled out in the world model)")


def _task_commands(add: AddCommand) -> None:
    """``tasks``, ``experts``, ``check-behaviour``: the web tasks, their scripted experts, and
    the before/after check of what the page readers decide."""
    p = add("tasks", "list the registered web tasks")
    _json_flag(p)

    p = add("experts", "run the scripted experts and print the per-task success table")
    p.add_argument("--tasks", help="comma separated (default: every task with an expert)")
    p.add_argument("--seeds", default="0:100", help="A:B seed range")
    p.add_argument("--contexts", type=int, default=4)
    p.add_argument("--base-url", help="task server to use (default: start one in-process)")
    p.add_argument(
        "--episodes",
        metavar="FILE",
        help="append each finished episode to FILE (JSON lines); episodes FILE already holds are "
        "not run again but counted, so a stopped run resumes",
    )
    _json_flag(p)

    p = add(
        "check-behaviour",
        "before/after check of a refactor: capture every task's start page (real browser), "
        "snapshot what the experts, the random policy and the policy's candidates make of them, "
        "compare two snapshots (exit 1 on any difference); models: the seeded models' outputs "
        "byte for byte (acting, updates, predictions), written or compared",
    )
    p.add_argument("action", choices=["capture", "snapshot", "compare", "models"])
    p.add_argument(
        "files",
        nargs="*",
        help="snapshot: OBS.json; compare: A.json B.json; models: a fingerprint to compare with",
    )
    p.add_argument("--out", help="capture / snapshot / models: the file to write")
    p.add_argument("--seed", type=int, default=0, help="capture: the seed of every task")
    p.add_argument("--tasks", help="capture: comma separated (default: every registered task)")
    p.add_argument("--timeout", type=float, default=90.0, help="capture: per-task reset limit (s)")
    p.add_argument("--show", type=int, default=5, help="compare: differences shown per kind")


def _checkpoint_commands(add: AddCommand) -> None:
    """``checkpoint`` and ``gate``: the checkpoints in S3 and which of them becomes LATEST."""
    p = add("checkpoint", "list, promote or roll back checkpoints in S3")
    p.add_argument("action", choices=["list", "promote", "rollback"])
    p.add_argument("version", nargs="?", type=int)
    p.add_argument("--kind", default="policy", choices=["policy", "world_model"])
    _json_flag(p)

    p = add(
        "gate",
        "checkpoint gate: probe each candidate against LATEST and promote it only if it is not "
        "worse by more than the margins (with gate.enabled)",
    )
    p.add_argument(
        "--once", action="store_true", help="decide the newest pending candidate (if any) and exit"
    )
    p.add_argument("--id", dest="gate_id", help="gate id (default host-pid)")
    _json_flag(p, "--once: print the decision as JSON")


def _inspection_commands(add: AddCommand) -> None:
    """``config``, ``status``, ``report``: the resolved configuration and a run's Prometheus data."""
    p = add("config", "print the resolved configuration (or the reference with --describe)")
    p.add_argument(
        "--describe",
        action="store_true",
        help="the reference of every field: the runtime configuration's, then each study's section",
    )
    p.add_argument(
        "--study",
        choices=sorted(STUDY_CONFIGS),
        help="the configuration of this study (`dynaweb experiment STUDY`): the runtime "
        "configuration and the study's section (--set experiment.FIELD=..., wm_study.FIELD=...)",
    )

    p = add(
        "status",
        "compact live view of a run from Prometheus (components, rates, versions, fidelity, lag)",
    )
    _prometheus_option(p)
    _json_flag(p)

    p = add("report", "PNG plots and a Markdown summary of a run from Prometheus data")
    p.add_argument("--run", dest="report_run", help="run id (default: --run-id / the config's)")
    p.add_argument("--out", default="report", help="output directory (default ./report)")
    _prometheus_option(p)


def _bench_command(add: AddCommand) -> None:
    """``bench``: throughput and latency on a broker of its own (evaluation.bench_*)."""
    p = add(
        "bench",
        "benchmarks on a broker of their own (collect: expert steps/s for 1 and 4 contexts; "
        "streams: worker vs a raw consumer, latency; reload: checkpoint announcement -> first "
        "dream group and live episode with it; act: acting's scored tokens/s against a forward "
        "pass)",
    )
    p.add_argument(
        "target", choices=["collect", "dream", "train", "streams", "reload", "wm-decode", "act"]
    )
    p.add_argument(
        "--decisions", type=int, default=32, help="act: start pages acted on, one at a time"
    )
    p.add_argument(
        "--world-model",
        help="wm-decode: a trained world model's Hugging Face directory (e.g. `experiment "
        "world-model`'s OUT/world_model)",
    )
    p.add_argument(
        "--data",
        help="wm-decode: real transitions, JSONL or .jsonl.gz (default: the committed held-out set)",
    )
    p.add_argument("--pairs", type=int, default=256, help="wm-decode: (page, action) pairs")
    p.add_argument(
        "--checkpoints", type=int, default=8, help="reload: new checkpoints to time (default 8)"
    )
    p.add_argument(
        "--interval", type=float, default=10.0, help="reload: seconds between checkpoints"
    )
    p.add_argument("--tasks", nargs="*", help="collect: task names, space or comma separated")
    p.add_argument("--seconds", type=float, default=10.0, help="collect: measured seconds per run")
    p.add_argument(
        "--settle-ms",
        type=float,
        help="collect: the settle wait after each action (default: "
        "collector.settle_ms; every run is repeated with 0)",
    )
    p.add_argument("--storage", choices=["memory", "s3"], default="memory", help="broker storage")
    p.add_argument("--n", type=int, default=60_000, help="transitions to push")
    p.add_argument("--obs-bytes", type=int, default=1024, help="size of each obs/next_obs tree")
    p.add_argument(
        "--latency-rate",
        type=float,
        default=0.0,
        help="streams: transitions/s of the latency phase (default: half the worker's rate)",
    )
    p.add_argument(
        "--starts",
        help="dream/train: JSONL of start observations (default: live expert-task pages, cached)",
    )
    p.add_argument(
        "--rounds",
        type=int,
        default=1,
        help="dream/train: measured rounds (more = steadier figures)",
    )
    p.add_argument(
        "--wm-tokens", type=int, default=48, help="dream: world-model tokens generated per step"
    )
    p.add_argument(
        "--stream",
        action="store_true",
        help="train: feed the trainer from the real topics (embedded stack) and compare with the "
        "same trainer on in-memory batches (stream_over_synthetic)",
    )
    p.add_argument(
        "--ranks",
        type=int,
        metavar="N",
        help="train: data-parallel ranks (gloo on CPU) against one rank on the same batches: "
        "rank_update_max_abs_diff (one update from the same weights) and samples_per_s_1 / _N",
    )
    _json_flag(p, SUMMARY_JSON)


def _eval_command(add: AddCommand) -> None:
    """``eval``: a checkpoint's world-model fidelity or its policy's success (evaluation.eval.world_model, evaluation.eval.policy)."""
    p = add(
        "eval",
        "evaluate a checkpoint: world-model fidelity on held-out real transitions, or the policy "
        "in the live browser on evaluation seeds; replay: the run's dreams replayed live "
        "(AUROC of the dreamed reward against real success)",
    )
    p.add_argument("target", choices=["world-model", "policy", "replay"])
    p.add_argument(
        "--checkpoint", default="latest", help="VERSION, 'latest', or a local HF directory"
    )
    p.add_argument(
        "--data", help="world-model: JSONL of transitions instead of the run's eval topic"
    )
    p.add_argument(
        "--split",
        choices=["heldout", "all"],
        default="heldout",
        help="world-model --data: keep only the held-out episodes (the stream worker's split) or all",
    )
    p.add_argument(
        "--limit", type=int, default=0, help="world-model: at most N transitions (0 = all)"
    )
    p.add_argument(
        "--decode",
        choices=["greedy", "rerank", "head"],
        default=None,
        help="world-model: greedy text, or the most likely of it and the change proposals "
        "(default: dream.wm_decode)",
    )
    p.add_argument("--tasks", help="policy: comma separated task names (default: collector.tasks)")
    p.add_argument(
        "--seeds", help="policy: A:B evaluation seeds (must lie outside the training seeds)"
    )
    p.add_argument(
        "--greedy",
        action=argparse.BooleanOptionalAction,
        default=True,
        help="policy: argmax action (default) or --no-greedy to sample",
    )
    p.add_argument(
        "--temperature", type=float, default=1.0, help="policy: sampling temperature (--no-greedy)"
    )
    p.add_argument("--contexts", type=int, default=1, help="policy: browser contexts")
    p.add_argument(
        "--lookahead",
        type=int,
        default=0,
        help="policy: also run the same episodes with look-ahead acting (the policy's K best "
        "actions simulated in the world model) and report it against greedy, paired",
    )
    p.add_argument(
        "--lookahead-depth", type=int, default=1, help="policy --lookahead: steps simulated"
    )
    p.add_argument(
        "--world-model",
        dest="world_model",
        help="policy --lookahead: the world model (VERSION, 'latest' or a directory; default: "
        "the policy's own version)",
    )
    p.add_argument(
        "--n", type=int, default=50, help="replay: dreamed rollouts replayed in the live browser"
    )
    p.add_argument(
        "--dreams",
        action=argparse.BooleanOptionalAction,
        default=True,
        help="policy: also report dreamed success of the same version from the dream topic",
    )
    p.add_argument(
        "--timeout", type=float, default=60.0, help="seconds to read a topic to its sentinel"
    )
    _json_flag(p, SUMMARY_JSON)


def _experiment_command(add: AddCommand) -> None:
    """``experiment``: the reproducible studies (evaluation.studies.sample_efficiency.study, evaluation.studies.world_model.study)."""
    p = add(
        "experiment",
        "reproducible studies through the real system; sample-efficiency: imitation vs "
        "real-only GSPO vs DynaWeb against real interactions (docs/experiment.md)",
    )
    p.add_argument(
        "study",
        choices=sorted(STUDY_CONFIGS),
        help="world-model: collect -> train -> eval of the world model vs 'nothing changes' "
        "(evaluation/studies/world_model/study.py)",
    )
    p.add_argument(
        "--out",
        required=True,
        help="output directory (results.csv, success_vs_real.png, results.md; "
        "rerun with the same --out resumes)",
    )
    p.add_argument(
        "--quick", action="store_true", help="a few minutes: checks every artifact, not the result"
    )
    _no_stack_flag(p)
    _json_flag(p, "print the summary as JSON on the last line")
    _experiment_world_model_args(p)

    p = add(
        "ablation",
        "the share of one setting: two sample-efficiency runs that differ only in it, paired "
        "by arm and training seed (final success on - off, per task, and its effect on the "
        "within-run contrasts); reads their finished cells, reruns nothing",
    )
    p.add_argument("on", help="the --out of the run with the setting on")
    p.add_argument("off", help="the --out of the run with the setting off")
    _read_only_outputs(p)

    p = add(
        "dream-fidelity",
        "a sample-efficiency run's DynaWeb world models against reality, per task: reward and "
        "page fidelity on the probe, dreamed against real success, beside each arm's gain; "
        "reads the finished cells, reruns nothing",
    )
    p.add_argument("out", help="the --out of `dynaweb experiment sample-efficiency`")
    _read_only_outputs(p)


def _experiment_world_model_args(p: argparse.ArgumentParser) -> None:
    """Options of ``dynaweb experiment world-model`` (defaults: ``evaluation.studies.world_model.config.WorldModelStudyConfig``)."""
    g = p.add_argument_group("world-model")
    g.add_argument(
        "--data",
        action="append",
        help="world-model: JSONL of transitions to use instead of collecting (repeat to concatenate files)",
    )
    g.add_argument(
        "--train-data",
        action="append",
        help="world-model: JSONL of transitions used for training only (repeat for more files): "
        "the held-out set stays the episode split of --data",
    )
    g.add_argument("--steps", type=int, help="world-model: training steps (upper bound)")
    g.add_argument(
        "--time-budget",
        dest="time_budget_s",
        type=float,
        help="world-model: training seconds (upper bound)",
    )
    g.add_argument("--batch", type=int, help="world-model: transitions per step")
    g.add_argument("--lr", type=float, help="world-model: peak learning rate")
    g.add_argument("--expert-episodes", type=int, help="world-model: expert episodes to collect")
    g.add_argument(
        "--random-episodes", type=int, help="world-model: random-policy episodes to collect"
    )
    g.add_argument(
        "--perturbed-episodes",
        type=int,
        help="world-model: perturbed-expert (near-miss) episodes to collect",
    )
    g.add_argument("--heldout-fraction", type=float, help="world-model: share of episodes held out")
    g.add_argument("--seed", type=int, help="world-model: seed of the model and the batch order")


def _data_commands(add: AddCommand) -> None:
    """``tokenizer`` and ``demos``: the BPE tokenizer's corpus and the demonstration files."""
    p = add(
        "tokenizer",
        "the project's BPE tokenizer (models/tokenizer_train.py): collect its corpus in the live "
        "browser, train it from the corpus, or measure tokens per transition against bytes",
    )
    p.add_argument("action", choices=["corpus", "train", "stats"])
    p.add_argument(
        "--out",
        help="corpus: the .jsonl.gz file to write; train: the directory to save_pretrained into",
    )
    p.add_argument(
        "--corpus",
        help="train/stats: corpus file (default: the committed "
        "models/assets/tokenizer-corpus.jsonl.gz)",
    )
    p.add_argument(
        "--vocab-size", type=int, help="train: vocabulary size (default 2048, the shipped one's)"
    )
    p.add_argument(
        "--vocab-sizes",
        default="512,1024,2048,4096,8192",
        help="stats: vocabulary sizes to train and measure side by side (comma separated)",
    )
    p.add_argument(
        "--expert-episodes", type=int, default=8, help="corpus: expert episodes per expert task"
    )
    p.add_argument(
        "--random-episodes", type=int, default=6, help="corpus: random-policy episodes per task"
    )
    _json_flag(p, SUMMARY_JSON)

    p = add(
        "demos",
        "import a JSONL demonstration file onto the expert topic, or export the topic to JSONL",
    )
    p.add_argument("action", choices=["import", "export"])
    p.add_argument("file", help="JSONL file (one Transition per line, see docs/demonstrations.md)")
    p.add_argument(
        "--skip-invalid", action="store_true", help="import: publish the valid lines anyway"
    )
    p.add_argument("--timeout", type=float, default=60.0, help="export: seconds to read the topic")
    _json_flag(p)


FAMILIES: tuple[Callable[[AddCommand], None], ...] = (
    _stack_commands,
    _component_commands,
    _task_commands,
    _checkpoint_commands,
    _inspection_commands,
    _bench_command,
    _eval_command,
    _experiment_command,
    _data_commands,
)
