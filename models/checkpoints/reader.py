"""The readers' side of checkpoints: a hot-reloading slot per model kind (``ModelSlot``), the
thread that downloads and loads an announced version while its reader keeps working
(``Prefetcher``), the latency from announcement to first use (``ReloadClock``) and the memory a
replaced model leaves (``release_memory``).  The store itself is ``models.checkpoints.store``."""

from __future__ import annotations

import gc
import logging
import os
import re
import shutil
import tempfile
import threading
import time
from collections.abc import Callable
from concurrent.futures import Executor
from pathlib import Path

from core.config import ModelConfig
from core.process import trim_heap
from models import metrics as M
from models.checkpoints.spec import ModelSpecMismatch, check_manifest
from models.checkpoints.store import S3_ERRORS, CheckpointStore, CorruptCheckpoint
from models.lm.base import LanguageModel
from models.lm.lora import BaseMismatch
from models.lm.saved import load_model
from models.lm.types import Tokenizer

log = logging.getLogger(__name__)


RAM_DIR = Path("/dev/shm")
RAM_MIN_FREE = 2 << 30  # RAM folder used only with this much room (bytes)
_OURS = re.compile(r"^dynaweb-[a-z-]+?-(\d+)-")  # reader_workdir's names: the owner's pid


def reader_workdir(prefix: str, where: str = "", ram: Path = RAM_DIR) -> Path:
    """A new folder for a reader's checkpoint downloads (``s3.reader_dir``), named
    ``dynaweb-<prefix>-<pid>-…``; the caller removes it when it stops.

    ``where`` empty: in RAM (``ram``, /dev/shm) when it exists with ``RAM_MIN_FREE`` free, else the
    temp dir.  Files written to disk wait on the kernel's write-back of everything else written
    on the machine (the S3 store's own files among them): measured here, a default model's
    download took 0.2-0.6 s to disk and 0.04 s to RAM.  A RAM folder left by a reader that died
    (its pid gone) is removed here, as RAM is not freed by a reboot-less machine otherwise."""
    base: Path | None = Path(where) if where else None
    if base is None and _has_room(ram):
        base = ram
        _sweep(ram)
    if base is not None:
        base.mkdir(parents=True, exist_ok=True)
    return Path(tempfile.mkdtemp(prefix=f"dynaweb-{prefix}-{os.getpid()}-", dir=base))


def _has_room(d: Path) -> bool:
    try:
        return d.is_dir() and os.access(d, os.W_OK) and shutil.disk_usage(d).free >= RAM_MIN_FREE
    except OSError:
        return False


def _sweep(d: Path) -> None:
    """Remove the download folders in ``d`` whose reader process no longer exists."""
    for p in d.glob("dynaweb-*"):
        m = _OURS.match(p.name)
        if m is None or not p.is_dir():
            continue
        try:
            os.kill(int(m.group(1)), 0)
        except ProcessLookupError:
            shutil.rmtree(p, ignore_errors=True)
        except OSError:  # alive, another user's: not ours to remove
            continue


class ReloadClock:
    """Time from a checkpoint's announcement (when this reader saw it) to its first use here,
    observed once per version into ``dynaweb_client_checkpoint_reload_to_use_seconds``.  A version that
    arrived by a ``LATEST`` poll (its announcement lost) is not timed."""

    def __init__(self, run: str, component: str, clock=time.time):
        self.metric = M.RELOAD_TO_USE.labels(run, component)
        self.clock = clock
        self.seen: dict[int, float] = {}
        self.last: float | None = None  # the last latency observed (for logs and tests)

    def announced(self, version: int) -> None:
        self.seen.setdefault(int(version), self.clock())

    def last_seen(self) -> float | None:
        """When the newest announcement not yet used was seen (None: none waits)."""
        return max(self.seen.values(), default=None)

    def used(self, version: int | None, at: float | None = None) -> float | None:
        """``version`` was used now (or at ``at``, a time of ``clock``): the latency, the first
        time it is used after its announcement (older announced versions it superseded are
        dropped)."""
        if version is None:
            return None
        t = self.seen.pop(int(version), None)
        for v in [v for v in self.seen if v < int(version)]:
            del self.seen[v]
        if t is None:
            return None
        self.last = max(0.0, (self.clock() if at is None else at) - t)
        self.metric.observe(self.last)
        return self.last


# the line a reader logs per version it loaded (``dynaweb bench reload`` reads its phases)
LOADED_LINE = (
    "loaded %s v%d in %.2fs (download %.2fs, held %.2fs, load lock %.2fs, free %.2fs, load %.2fs)"
)

_FROZEN = False
# a model was put out of use (``ModelSlot.install``) since the last ``release_memory``: the
# prefetch thread frees it while it idles, so the next load does not wait for the collection
_REPLACED = threading.Event()


def release_memory() -> None:
    """Free a replaced model now.  A loaded model is held in reference cycles (modules and their
    hooks), so only a full garbage collection frees it; in a process with torch and transformers
    imported that took ~600 ms, so it came rarely and a hot-reloading reader's memory rose by
    ~3.7 MB per reload (the soak's latest-policy collector: about 300 MB/h).  The objects that
    exist before the first load (imports) are frozen out of collection once, after which a full
    collection takes about a millisecond; ``malloc_trim`` hands the freed heap back to the OS."""
    global _FROZEN
    _REPLACED.clear()
    if not _FROZEN:
        gc.collect()
        gc.freeze()
        _FROZEN = True
        return
    gc.collect()
    trim_heap()


# A reader's first load used to import transformers' model and tokenizer stack on the spot: 3.0 s
# of a 3.1 s first load of the default policy on an idle machine, 20 s on a loaded one, while the
# collector waited for it to act.  Every slot imports it in a background thread from the moment
# it exists (a collector starts its browser meanwhile; the trainer's version 0 comes later), and
# a load waits for that import instead of racing it (two threads importing one lazy package).
_WARM = threading.Event()
_WARM_STARTED = threading.Lock()


def warm_imports() -> None:
    """Import the loaders' libraries (transformers' auto classes and tokenizers, the default
    GPT-Neo architecture, the project's loaders) in a daemon thread, once per process; sets
    ``_WARM`` when done, failed or not (a load then imports what is missing itself)."""
    if not _WARM_STARTED.acquire(blocking=False):
        return
    threading.Thread(target=_warm, name="reader-warm-imports", daemon=True).start()


def _warm() -> None:
    try:
        import transformers.models.gpt_neo.modeling_gpt_neo  # noqa: F401 (the default model)
        from transformers import AutoModelForCausalLM, AutoTokenizer  # noqa: F401

        import models.policy.runner  # noqa: F401
        import models.world_model.runner  # noqa: F401
    except Exception as e:  # a load imports it again and reports what is wrong there
        log.warning("warm-up import failed (the first load imports instead): %s", e)
    finally:
        _WARM.set()


# transformers' from_pretrained swaps torch's init functions for no-ops process-wide while it
# builds a model and puts them back after: two loads at once could leave them swapped.  Slots
# download in parallel (the dream generator's two kinds) and load one at a time.
_LOAD_LOCK = threading.Lock()


class Prefetcher:
    """Downloads and loads announced checkpoints while a reader keeps acting with the old ones.

    ``want()`` (the checkpoint watcher's thread, on an announcement of a version the reader does
    not have) wakes a thread that calls ``prefetch`` on every slot (in parallel on ``pool`` when
    given) and then ``on_ready()``; the reader then installs them at its next safe point
    (``ModelSlot.refresh`` finds them ready and only re-reads ``LATEST``).  So the time to
    download and load overlaps the reader's work instead of following it.  A prefetch that fails
    also calls ``on_ready()``: the reader's own refresh then meets the error as before."""

    def __init__(
        self,
        slots: list[ModelSlot],
        on_ready: Callable[[], None],
        stop: threading.Event,
        pool: Executor | None = None,
        name: str = "",
        on_slot_ready: Callable[[ModelSlot], None] | None = None,
    ):
        self.slots, self.on_ready, self.stop, self.pool = slots, on_ready, stop, pool
        # called with each slot as soon as it is ready, before the others finish (a reader that
        # can put one kind in use without the other, as the dream generator does the policy)
        self.on_slot_ready = on_slot_ready
        self._wanted = threading.Event()
        self.thread = threading.Thread(target=self._run, name=name or "prefetch", daemon=True)

    def start(self) -> Prefetcher:
        self.thread.start()
        return self

    def want(self) -> None:
        self._wanted.set()

    @property
    def wanted(self) -> bool:
        return self._wanted.is_set()

    def _run(self) -> None:
        while not self.stop.is_set():
            if not self._wanted.wait(0.5):
                if _REPLACED.is_set():  # idle: free the replaced model now, not before a load
                    with _LOAD_LOCK:
                        release_memory()
                continue
            self._wanted.clear()
            try:
                if self.pool is not None and len(self.slots) > 1:
                    ready = list(self.pool.map(self._prefetch, self.slots))
                else:
                    ready = [self._prefetch(s) for s in self.slots]
            except Exception as e:  # noqa: BLE001 - the reader's own refresh reports it
                log.warning("prefetching a checkpoint failed (%s); the reader reloads itself", e)
                ready = [True]
            if any(ready):
                self.on_ready()

    def _prefetch(self, slot: ModelSlot) -> bool:
        ready = slot.prefetch()
        if ready and self.on_slot_ready is not None:
            self.on_slot_ready(slot)
        return ready


class ModelSlot:
    """The loaded version of one model kind; ``refresh`` hot-reloads from LATEST.

    Readers call ``refresh`` on an announcement and ``poll`` on every round: ``poll`` re-reads
    LATEST once ``poll_s`` (``s3.latest_poll_s``) passed since the last read, so a lost
    announcement delays a reload by at most ``poll_s``; an S3 error there is logged and counted
    (``dynaweb_client_errors_total{service="s3"}``) and the loaded weights stay."""

    def __init__(
        self,
        store: CheckpointStore,
        kind: str,
        work: Path,
        run: str,
        poll_s: float = 0.0,
        component: str = "dream",
        clock: Callable[[], float] = time.monotonic,
        model_config: ModelConfig | None = None,
    ):
        self.store, self.kind, self.work, self.run = store, kind, work, run
        self.poll_s, self.component, self._clock = poll_s, component, clock
        # the configuration's ``model`` section: a checkpoint written for another model is refused
        # with ``ModelSpecMismatch`` (models/checkpoints/spec.py); None: not checked
        self.model_config = model_config
        self.version: int | None = None
        self.loading: int | None = None  # the version being downloaded or loaded, if any
        self.model: LanguageModel | None = None
        self.tokenizer: Tokenizer | None = None
        self.refused: set[int] = set()
        self.extra: dict = {}  # the loaded version's manifest ``extra``
        self._read_at: float | None = None  # when LATEST was last read
        # (version, model, tokenizer, extra, folder) downloaded and loaded, not yet in use
        self._ready: tuple | None = None
        # called after a download and before its load (the dream generator holds the world
        # model's load back while the first round of a new policy runs: a load and the garbage
        # collection before it hold the interpreter lock the decode loop needs)
        self.hold_load: Callable[[], None] | None = None
        self._fetch_lock = threading.Lock()  # one download and load at a time per slot
        self._ready_lock = threading.Lock()
        if poll_s > 0:
            M.DREAM_POLL_RELOADS.labels(run, kind)  # export 0 before the first poll reload
        warm_imports()

    def refresh(self) -> bool:
        """Load LATEST if it differs from what is loaded; True if a new model was loaded."""
        self.prefetch()
        return self.install()

    def prefetch(self) -> bool:
        """Download and load LATEST if it is new, without putting it in use: the model in use stays
        until ``install`` (a reader prefetches in a thread of its own while it keeps acting, then
        installs between two uses).  True if a new version is ready to install."""
        with self._fetch_lock:
            self._read_at = self._clock()
            lat = self.store.latest(self.kind)
            ready = self._ready
            have = {self.version, None if ready is None else ready[0]}
            if (
                lat is not None
                and lat["version"] not in have
                and lat["version"] not in self.refused
            ):
                self._prepare(lat["version"], lat["manifest_sha256"])
            return self._ready is not None

    def poll_due(self) -> bool:
        return self.poll_s > 0 and (
            self._read_at is None or self._clock() - self._read_at >= self.poll_s
        )

    def poll(self) -> bool:
        """``refresh`` if ``poll_s`` passed since LATEST was last read; True if a new model was
        loaded (counted in ``dynaweb_dream_latest_poll_reloads_total``)."""
        if not self.poll_due():
            return False
        try:
            loaded = self.refresh()
        except S3_ERRORS as e:
            M.CLIENT_ERRORS.labels(self.run, self.component, "s3").inc()
            log.warning("polling %s LATEST failed: %s (keeping v%s)", self.kind, e, self.version)
            return False
        if loaded:
            M.DREAM_POLL_RELOADS.labels(self.run, self.kind).inc()
            log.info(
                "%s v%s found by polling LATEST (no announcement seen)", self.kind, self.version
            )
        return loaded

    def known(self, version: int) -> bool:
        """Whether ``version`` is the loaded one, the one being loaded now or one loaded and ready
        to install (an older one may be a rollback: not known)."""
        ready = self._ready
        return version in (self.version, self.loading, None if ready is None else ready[0])

    def _prepare(self, version: int, manifest_sha256: str | None) -> None:
        """Download and load ``version`` into ``_ready`` (a refused one is remembered in
        ``refused``); under ``_fetch_lock``."""
        t0 = time.time()
        self.loading = version
        dest = self.work / f"{self.kind}-{version}"
        try:
            try:
                manifest = self.store.download(
                    self.kind, version, dest, manifest_sha256, only="hf/"
                )
            except CorruptCheckpoint as e:
                log.error("refusing %s v%s: %s (keeping v%s)", self.kind, version, e, self.version)
                M.DREAM_RELOADS.labels(self.run, self.kind, "refused").inc()
                self.refused.add(version)
                shutil.rmtree(dest, ignore_errors=True)
                return
            if self.model_config is not None:
                try:  # another model than configured: raised, it stops the reader
                    check_manifest(manifest, self.model_config, self.run)
                except ModelSpecMismatch:
                    shutil.rmtree(dest, ignore_errors=True)
                    raise
            t_dl = time.time()
            _WARM.wait(300.0)  # the warm-up's import, if still running ("held" in the log line)
            if self.kind == "policy":
                from models.policy.model import Policy as cls
            else:
                from models.world_model.model import WorldModel as cls
            if self.hold_load is not None:
                self.hold_load()
            t_held = time.time()
            with _LOAD_LOCK:
                t_lock = time.time()
                if _REPLACED.is_set() or not _FROZEN:
                    release_memory()  # frees models replaced since; the first time, freezes imports
                t_free = time.time()
                try:  # a LoRA checkpoint on the base of the newest model here: adapters only
                    model, tok = load_model(cls, str(dest / "hf"), reuse=self._newest())
                except BaseMismatch as e:  # adapters on another base than this reader's
                    log.error(
                        "refusing %s v%s: %s (keeping v%s)", self.kind, version, e, self.version
                    )
                    M.DREAM_RELOADS.labels(self.run, self.kind, "refused").inc()
                    self.refused.add(version)
                    shutil.rmtree(dest, ignore_errors=True)
                    return
            model.eval()
        finally:
            self.loading = None
        t_done = time.time()
        extra = dict((manifest or {}).get("extra") or {})  # e.g. the world model's wm_gate
        with self._ready_lock:
            old, self._ready = self._ready, (version, model, tok, extra, dest)
        if old is not None and old[4] != dest:
            shutil.rmtree(old[4], ignore_errors=True)  # prefetched, superseded before install
        M.DREAM_RELOAD_SECONDS.labels(self.run, self.kind).observe(t_done - t0)
        log.info(
            LOADED_LINE,
            self.kind,
            version,
            t_done - t0,
            t_dl - t0,
            t_held - t_dl,
            t_lock - t_held,
            t_free - t_lock,
            t_done - t_free,
        )

    def _newest(self) -> tuple[LanguageModel, Tokenizer] | None:
        """(model, tokenizer) of the newest version here (ready, else in use), or None: a LoRA
        checkpoint on the same base is loaded into a copy of it sharing the base's weights."""
        ready = self._ready
        if ready is not None:
            return ready[1], ready[2]
        return None if self.model is None else (self.model, self.tokenizer)

    def install(self) -> bool:
        """Put the prefetched version in use; True if there was one."""
        with self._ready_lock:
            ready, self._ready = self._ready, None
        if ready is None:
            return False
        version, model, tok, extra, dest = ready
        old = self.work / f"{self.kind}-{self.version}" if self.version is not None else None
        if self.model is not None:
            _REPLACED.set()
        self.model, self.tokenizer, self.version, self.extra = model, tok, version, extra
        if old is not None and old != dest:
            shutil.rmtree(old, ignore_errors=True)
        M.DREAM_RELOADS.labels(self.run, self.kind, "loaded").inc()
        M.DREAM_VERSION.labels(self.run, self.kind).set(version)
        return True
