"""Demonstrations: JSONL files <-> the run's expert topic (``dynaweb demos``).

    dynaweb demos import demos.jsonl      # validate, then publish onto topics.expert
    dynaweb demos export out.jsonl        # read topics.expert up to a sentinel, write JSONL

One line = one ``streams.records.Transition`` as a JSON object (schema in
docs/demonstrations.md).  Import validates every line first and reports each
invalid one with its line number; with any invalid line nothing is published
(unless ``skip_invalid``: then the valid lines are published and the invalid
ones are still reported and counted).  Episode checks, per ``episode_id``:
no duplicate step, steps ``0..n-1`` without gaps, only the last step final
(``done`` or ``truncated``) and the last step final - an episode that never
ends would never be assembled by the stream worker, i.e. silently dropped.

``run_id`` may be left out (it is the target run's); a different ``run_id``
is rewritten to the target run (the stream worker dead-letters other runs'
records) and counted in the summary.  Everything else is kept as is, so
``export(import(x)) == x`` for a file of the target run in export order.

Export order: episodes by (first step's ``created_at``, ``episode_id``), steps
in order; a record seen twice on the topic (the same file imported twice) is
written once and counted as a duplicate; control records (sentinels) are not
data and are skipped.
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from core.config import Config
from streams import records
from streams.records import SCHEMA, RecordError, Transition


class DemoFileError(ValueError):
    """A demonstration file with invalid lines; ``errors`` are ``(line, message)``."""

    def __init__(self, path: str, errors: list[tuple[int, str]]):
        shown = "\n".join(f"  {path}:{n}: {msg}" for n, msg in errors[:50])
        more = f"\n  ... and {len(errors) - 50} more" if len(errors) > 50 else ""
        super().__init__(
            f"{len(errors)} invalid line(s) in {path}; nothing was published:\n{shown}{more}"
        )
        self.errors = errors


@dataclass
class Parsed:
    transitions: list[Transition] = field(default_factory=list)
    lines: list[int] = field(default_factory=list)  # line number of each transition
    errors: list[tuple[int, str]] = field(default_factory=list)
    blank: int = 0
    run_id_rewritten: int = 0


def parse_line(text: str, run_id: str) -> tuple[Transition, bool]:
    """One JSONL line -> (Transition, run_id_rewritten); raises RecordError."""
    try:
        d = json.loads(text)
    except json.JSONDecodeError as e:
        raise RecordError("not_json", f"not valid JSON ({e.msg} at column {e.colno})") from None
    if not isinstance(d, dict):
        raise RecordError("wrong_type", f"a line must be a JSON object, got {type(d).__name__}")
    unknown = sorted(set(d) - {f for f in Transition.__dataclass_fields__})
    if unknown:
        raise RecordError(
            "unknown_field", f"unknown field(s) {unknown} (see docs/demonstrations.md)"
        )
    if d.setdefault("type", "transition") != "transition":
        raise RecordError("unexpected_type", f"type must be 'transition', got {d['type']!r}")
    if d.setdefault("schema", SCHEMA) not in records.SUPPORTED:
        raise RecordError(
            "schema_version", f"schema {d['schema']!r} not in supported {records.SUPPORTED}"
        )
    if d.get("source") != "expert":
        raise RecordError("bad_value", f"source must be 'expert', got {d.get('source')!r}")
    rewritten = "run_id" in d and d["run_id"] != run_id
    if "run_id" not in d or rewritten:
        if not isinstance(d.get("run_id", ""), str):
            raise RecordError("wrong_type", "field 'run_id' must be str")
        d["run_id"] = run_id
    for name, kind in (("info", dict), ("producer_id", str), ("action_tokens", int)):
        if name in d and (not isinstance(d[name], kind) or isinstance(d[name], bool)):
            raise RecordError("wrong_type", f"field {name!r} must be {kind.__name__}")
    try:
        t = Transition.validate(d)
    except TypeError as e:
        raise RecordError("bad_value", str(e)[:200]) from None
    return t, rewritten


def parse_lines(lines: Iterable[str], run_id: str) -> Parsed:
    """Validate every line and every episode; collects errors, never raises."""
    out = Parsed()
    for n, text in enumerate(lines, 1):
        if not text.strip():
            out.blank += 1
            continue
        try:
            t, rewritten = parse_line(text, run_id)
        except RecordError as e:
            out.errors.append((n, str(e)))
            continue
        out.transitions.append(t)
        out.lines.append(n)
        out.run_id_rewritten += int(rewritten)
    out.errors.extend(check_episodes(out.transitions, out.lines))
    out.errors.sort()
    return out


def check_episodes(ts: list[Transition], lines: list[int]) -> list[tuple[int, str]]:
    errors: list[tuple[int, str]] = []
    eps: dict[str, dict[int, tuple[Transition, int]]] = {}
    for t, n in zip(ts, lines, strict=True):
        steps = eps.setdefault(t.episode_id, {})
        if t.step in steps:
            errors.append(
                (
                    n,
                    f"episode {t.episode_id}: step {t.step} again (first on line {steps[t.step][1]})",
                )
            )
            continue
        steps[t.step] = (t, n)
    for ep, steps in eps.items():
        last = max(steps)
        missing = sorted(set(range(last + 1)) - set(steps))
        if missing:
            n = steps[last][1]
            errors.append(
                (n, f"episode {ep}: steps {missing[:10]} missing (steps must be 0..{last})")
            )
        for s, (t, n) in sorted(steps.items()):
            if s != last and t.final:
                errors.append(
                    (n, f"episode {ep}: step {s} is done/truncated but step {last} follows")
                )
        t, n = steps[last]
        if not t.final:
            errors.append(
                (n, f"episode {ep}: the last step ({last}) is neither done nor truncated")
            )
    return errors


def read_file(path: str | Path, run_id: str) -> Parsed:
    with open(path, encoding="utf-8") as fh:
        return parse_lines(fh, run_id)


def import_file(
    cfg: Config, path: str | Path, *, skip_invalid: bool = False, publisher: Any = None
) -> dict:
    """Validate ``path`` and publish its transitions onto the run's expert topic (flushed)."""
    from streams.kafka import ensure_topics, make_publisher

    parsed = read_file(path, cfg.run_id)
    if parsed.errors and not skip_invalid:
        raise DemoFileError(str(path), parsed.errors)
    topics = ensure_topics(cfg)
    own = publisher is None
    pub = publisher or make_publisher(cfg.kafka, client="demos", run=cfg.run_id)
    try:
        for t in parsed.transitions:
            pub.send(topics.expert, t, key=t.episode_id)  # one episode -> one partition, in order
        pub.flush()
    finally:
        if own:
            pub.close()
    return {
        "file": str(path),
        "topic": topics.expert,
        "published": len(parsed.transitions),
        "episodes": len({t.episode_id for t in parsed.transitions}),
        "invalid": len(parsed.errors),
        "errors": [f"line {n}: {m}" for n, m in parsed.errors],
        "blank_lines": parsed.blank,
        "run_id_rewritten": parsed.run_id_rewritten,
    }


def read_expert_topic(cfg: Config, timeout: float = 60.0) -> tuple[list[Transition], dict]:
    """Every expert transition of the run (deduplicated, in export order) and counts."""
    from streams.kafka import ensure_topics, is_control, read_until_sentinel

    topics = ensure_topics(cfg)
    seen: dict[tuple[str, int], Transition] = {}
    counts = {"records": 0, "duplicates": 0, "control": 0, "invalid": 0}
    for _m, raw in read_until_sentinel(cfg.kafka, topics.expert, cfg.run_id, timeout=timeout):
        counts["records"] += 1
        if is_control(raw):
            counts["control"] += 1
            continue
        try:
            t = records.decode(raw, expect="transition")
        except RecordError:
            counts["invalid"] += 1  # the stream worker dead-letters these; reported, not exported
            continue
        if t.key in seen:
            counts["duplicates"] += 1
            continue
        seen[t.key] = t
    return export_order(list(seen.values())), counts


def export_order(ts: list[Transition]) -> list[Transition]:
    first: dict[str, tuple[float, int]] = {}
    for t in ts:
        cur = first.get(t.episode_id)
        if cur is None or t.step < cur[1]:
            first[t.episode_id] = (t.created_at, t.step)
    return sorted(ts, key=lambda t: (first[t.episode_id][0], t.episode_id, t.step))


def to_line(t: Transition) -> str:
    return json.dumps(asdict(t), ensure_ascii=False, separators=(",", ":"))


def export_file(cfg: Config, path: str | Path, timeout: float = 60.0) -> dict:
    ts, counts = read_expert_topic(cfg, timeout=timeout)
    p = Path(path)
    tmp = p.with_name(p.name + ".part")
    with open(tmp, "w", encoding="utf-8") as fh:
        for t in ts:
            fh.write(to_line(t) + "\n")
    tmp.replace(p)
    return {
        "file": str(p),
        "transitions": len(ts),
        "episodes": len({t.episode_id for t in ts}),
        **counts,
    }


def main(args: Any, cfg: Config) -> int:
    """``dynaweb demos import|export FILE``."""
    if args.action == "import":
        res = import_file(cfg, args.file, skip_invalid=bool(getattr(args, "skip_invalid", False)))
    else:
        res = export_file(cfg, args.file, timeout=float(getattr(args, "timeout", 60.0) or 60.0))
    if getattr(args, "json", False):
        print(json.dumps(res))
    elif args.action == "import":
        for e in res["errors"]:
            print(f"{args.file}: {e}")
        print(
            f"published {res['published']} transitions ({res['episodes']} episodes) to {res['topic']}"
            + (f"; {res['invalid']} invalid line(s) skipped" if res["invalid"] else "")
            + (
                f"; run_id rewritten on {res['run_id_rewritten']}"
                if res["run_id_rewritten"]
                else ""
            )
        )
    else:
        print(
            f"wrote {res['transitions']} transitions ({res['episodes']} episodes) to {res['file']}"
            + (f"; {res['duplicates']} duplicate(s) skipped" if res["duplicates"] else "")
            + (f"; {res['invalid']} invalid record(s) skipped" if res["invalid"] else "")
        )
    return 1 if getattr(args, "action", "") == "import" and res.get("invalid") else 0
