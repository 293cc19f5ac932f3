"""The fit job: Spherical PCA of a stored corpus, checkpointed, resumable, retried.

``sphdist fit`` is :class:`FitRequest`, run by :func:`sphdist.jobs.run` like every command that
writes: the request validates the solver's parameters against :data:`sphdist.core.params.PARAMS`
and the job's settings against :data:`sphdist.jobs.params.JOB_PARAMS` when it is built (reading
nothing); :func:`~sphdist.jobs.run` applies the output policy, opens the input once
(:meth:`FitRequest.prepare`: its shape against the parameters, the warm start), holds the output,
and, under its lock, the fit decides what to do with a model already there
(:meth:`FitRequest.decide`: a fresh fit, a resume of its checkpoint, or a refusal whose remedies
are this request changed, :meth:`FitRequest.continues`). Then :meth:`FitRequest.execute` runs
:func:`sphdist.core.solver.fit` on the active Dask scheduler (the command line's cluster,
started once the output is held), checkpointing to the output, and resumes from its own last
checkpoint when a worker is lost (``retries``). A second fit of the same output is refused with
:class:`~sphdist.errors.OutputLockedError` before it recovers, cleans up or writes anything.

What a worker loss is, and its messages, is :mod:`sphdist.jobs.cluster`'s
(:func:`~sphdist.jobs.cluster.worker_losses`); here it is applied: the restart from the last
checkpoint, and the report of a Ctrl-C that names the checkpoint and the resume.

References
----------
.. [1] Liu, K., Li, Q., Wang, H. and Tang, G. (2019). Spherical Principal Component Analysis. SDM.
   (Algorithm 1.)
"""

from __future__ import annotations

import contextlib
import dataclasses
import functools
import logging
import os
import time
from collections.abc import Callable
from typing import Any, ClassVar

import numpy as np

from sphdist.core import _device, graph, solver
from sphdist.core.partials import HELD_EXTRA
from sphdist.errors import (
    CheckpointMismatchError,
    DataError,
    InsufficientMemoryError,
    Interrupted,
    ParameterError,
    Text,
    message_of,
    option,
    remedy,
)
from sphdist.io import Output, absolute, is_storage_failure, refuse_existing, storage_error
from sphdist.io.corpus import open_input
from sphdist.io.model import Model, ScratchV, load_checkpoint, open_model, save_checkpoint, u_sha256
from sphdist.jobs import cluster
from sphdist.jobs._lifecycle import Request, located
from sphdist.jobs.params import (
    JOB_PARAMS,
    RESUME_KEYS,
    SOLVER_PARAMS,
    FitConfig,
    SolverParameters,
    recorded_params,
    resume_value,
    validate,
    validated,
)

__all__ = ["FitRequest", "warm_start", "RESUME_KEYS"]

logger = logging.getLogger("sphdist")


def _log_iteration(state: solver.FitState) -> None:
    logger.info("iter %4d  objective %.10g  rel_change %.3e  %.2fs%s", state.iteration,
                state.objective[-1], state.relative_change, state.seconds[-1],
                "  (converged)" if state.converged else "")


@dataclasses.dataclass(frozen=True)
class _Opened:
    """What a fit read before it writes; under the lock, what it found at its output."""

    source: Any  # the open input
    params: dict[str, Any]  # what is stored with the model (dtype by name, init_from)
    U0: np.ndarray | None  # the warm start
    previous: Model | None = None  # the checkpoint to resume
    before: Any = None  # the commit at the output when it was decided on (after a recovery)


@dataclasses.dataclass(frozen=True)
class _Where(Request):
    """A fit's first fields: its corpus and model, and what it does with a model there.

    Before the solver's parameters (:class:`~sphdist.core.params.SolverParameters`): a
    dataclass' fields are its bases' first, and a remedy names the fields in their order.
    """

    input: Any
    output: Any
    _: dataclasses.KW_ONLY
    resume: bool = False
    overwrite: bool = False


@dataclasses.dataclass(frozen=True, kw_only=True)
class FitRequest(SolverParameters, _Where):
    """``sphdist fit``: Spherical PCA of a stored corpus, checkpointed to ``output``.

    Run it with :func:`sphdist.jobs.run`: ``run(FitRequest("c.zarr", "m.zarr",
    n_components=20, max_iter=50))`` returns the final :class:`~sphdist.io.model.Model`, read
    back from ``output``. Every parameter after ``output`` is a keyword.

    Parameters
    ----------
    input : path-like
        A ``corpus.zarr`` or a dense 2-D zarr array (see :mod:`sphdist.io.corpus`).
    output : path-like
        The ``model.zarr`` to write (see :mod:`sphdist.io.model`).
    resume : bool, default False
        Continue from the checkpoint at ``output`` if there is one (else start afresh). The
        resumed run reaches the same U, V and objective history as an uninterrupted one.
    overwrite : bool, default False
        Replace an existing ``output`` when not resuming.
    n_components : int
        r, ``1 <= r <= min(m, n)``.
    lam, mu, max_iter, tol, init, n_power_iter, split_every, dtype, polar, partials, accelerate
        Solver parameters, see :func:`sphdist.core.solver.fit`; constraints and defaults are
        those of :data:`sphdist.core.params.PARAMS` (the extrapolated U-step is on by default).
    random_state : int or None, default 0
        Seed of the initialisation (stored with the model). 0, as for
        :class:`sphdist.SphericalPCA` and ``sphdist fit``: a checkpointed fit that restarts
        (``retries``) or is rerun from its stored parameters must reach the same iterates,
        which a fresh draw (None) would not.
    device : {"cpu", "cuda"}, default "cpu"
        Where the chunk kernels run (:mod:`sphdist.core._device`); not a resume parameter: a
        checkpoint written on one device resumes on the other (the model format is one).
    init_from : path-like, optional
        A ``model.zarr`` whose U (m, r) is the warm start U_0 (orthonormalised by its polar
        factor, :func:`sphdist.core.solver.initialize`); ``init`` and ``random_state`` are then
        not used. Its feature space must be the corpus' (same feature scheme; same vocabulary
        when both have one); the idf may differ (a refit on newer documents). Recorded in the
        parameters as ``init_from`` (the sha256 of that U), so ``resume`` continues only the
        same warm start.
    checkpoint_every : int, default 1
        Write the model every this many iterations (and always at the end), once
        ``checkpoint_interval`` has passed since the last write.
    checkpoint_interval : float, default 60.0
        In seconds: the least time of fitting between two checkpoints (since the last write,
        or the start of the fit); 0 writes every ``checkpoint_every`` iterations. A fit that
        ends sooner writes only its final model. Which iterations are written changes no bit
        of the result: a resume continues any of them bitwise.
    memory_budget : int or str, default "auto"
        The most memory X may take, in bytes or as a size (``"4GiB"``); X (its CSC values,
        indices and pointers, :func:`sphdist.jobs.cluster.stored_nbytes`) is read once and
        held in memory when it fits, else streamed from the store chunk by chunk every
        iteration (the result is bitwise the same). "auto" (or None): a quarter of the memory
        available to this process, or of the workers' summed memory limits on a cluster
        (:func:`sphdist.jobs.cluster.holds_in_memory`); 0 always streams.
    retries : int, default 3
        Restarts after a worker loss: when a worker is lost in the middle of an iteration
        (killed, pre-empted, out of memory), the fit resumes from the last checkpoint it
        committed (or starts again as it started, if none), which reaches bitwise the same U,
        V and objective history as an undisturbed run.
    callback : callable or None
        Called with the solver state after the initialisation and every iteration; default
        logs one line (iteration, objective, relative change, seconds) to the ``sphdist``
        logger.

    Attributes
    ----------
    config : FitConfig
        The solver's parameters, validated (not yet against the corpus' shape), ``dtype`` a
        ``numpy.dtype``: what :func:`sphdist.core.solver.fit` is given.
    budget : int or None
        ``memory_budget`` in bytes (None: "auto").

    Raises
    ------
    ParameterError
        When built: if a solver parameter is outside :data:`sphdist.core.params.PARAMS`, a
        setting outside :data:`sphdist.jobs.params.JOB_PARAMS`, or the memory budget is not a
        size.
    ValueError
        When built: if a path is empty or names an unknown protocol.

    Notes
    -----
    The paths are located once, when the request is built (``located``);
    ``input`` and ``output`` are made absolute then (:func:`sphdist.jobs.cluster.task_path`),
    as the workers' working directories are their own.
    Besides what :func:`~sphdist.jobs.run` raises for every command, running it raises:

    - OutputExistsError, if ``output`` holds a model and neither ``resume`` nor ``overwrite``
      is set; CheckpointMismatchError, if the checkpoint to resume was written for another
      corpus or other parameters (each with the fits that resolve it as remedies);
    - OutputLockedError, if another process is writing ``output`` (``overwrite`` does not
      take it over);
    - WorkersLostError, when workers are still lost after ``retries`` restarts (the cause is
      chained);
    - DataError, if every document of ``input`` is empty (nothing to fit);
    - CorpusMismatchError, if ``init_from`` was fitted in another feature space;
    - DeviceError, with ``device="cuda"``, if CuPy or a CUDA device is missing (before the
      output is held);
    - InsufficientMemoryError, if the device runs out of memory during the fit; the last
      checkpoint is intact and the message holds the fits that resume it (on the CPU, or on
      the device);
    - StorageError, if an object store holding the input or the output fails a request even
      after its client's retries; the last complete checkpoint stays readable;
    - Interrupted, on Ctrl-C, naming the last checkpoint and the fit that continues it;
    - ParameterError, CorpusFormatError, InputNotFoundError, ModelFormatError, for parameters
      that do not fit the corpus (``n_components`` beyond its shape; the r of ``init_from``
      not ``n_components``) or a missing or unreadable input.
    """

    command: ClassVar[str] = "fit"
    writes: ClassVar[str] = "model"
    targets: ClassVar[tuple[str, ...]] = ("input", "output")
    #: Not in a remedy: how this run reports and spends its memory and restarts (no bit of the
    #: result depends on them), as the remedies before this request.
    quiet: ClassVar[tuple[str, ...]] = ("callback", "memory_budget", "retries")

    init_from: Any = None
    checkpoint_every: int = JOB_PARAMS["checkpoint_every"].default
    checkpoint_interval: float = JOB_PARAMS["checkpoint_interval"].default
    memory_budget: int | str | None = "auto"
    retries: int = JOB_PARAMS["retries"].default
    callback: Callable[[solver.FitState], None] | None = dataclasses.field(
        default=_log_iteration, compare=False)
    config: FitConfig = dataclasses.field(init=False, repr=False, compare=False)
    budget: int | None = dataclasses.field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        config = FitConfig(**{n: getattr(self, n) for n in SOLVER_PARAMS}).checked("FitRequest")
        validate({name: getattr(self, name) for name in JOB_PARAMS}, "FitRequest", JOB_PARAMS)
        fields = {"config": config, "dtype": config.dtype.name,
                  "budget": cluster.check_memory_budget(self.memory_budget)}
        for name in ("input", "output"):  # absolute once, for the workers
            fields[name] = cluster.task_path(getattr(self, name), output=name == "output")
        fields["init_from"] = located(self.init_from)  # read by this process alone
        for name, value in fields.items():
            object.__setattr__(self, name, value)

    def inputs(self) -> tuple[Any, ...]:
        """The corpus and the warm start."""
        return (self.input, self.init_from)

    def prepare(self) -> _Opened:
        """The open corpus, checked against the parameters and the device; the warm start."""
        if self.device == "cuda":  # before the output is held or a cluster starts
            _device.check_device("cuda")
        source = open_input(self.input)
        source.require_documents()
        solver.check_shape(self.config, source.shape)  # the table's constraints: when built
        params = {**self.config.values(), "dtype": self.dtype, "init_from": None}
        U0 = None
        if self.init_from is not None:
            U0 = warm_start(self.init_from, source, self.input, self.n_components)
            params["init_from"] = {"path": absolute(self.init_from), "u_sha256": u_sha256(U0)}
        return _Opened(source, params, U0)

    def decide(self, opened: _Opened, held: Output | None = None) -> _Opened:
        """Under the lock alone: the checkpoint there recovered, read, resumed or refused.

        Before the lock nothing is looked at (another fit may be committing there); under
        it, this fit is the output's writer: an interrupted commit is put back, then
        :meth:`continues` decides.
        """
        if held is None:
            return opened
        previous = load_checkpoint(held, recover=True)
        resumed = self.continues(previous, opened.source.fingerprint, opened.params)
        return dataclasses.replace(opened, previous=previous if resumed else None,
                                   before=held.identity())  # after a recovery, before a write

    def continues(self, previous: Model | None, fingerprint: str,
                  params: dict[str, Any]) -> bool:
        """Whether this fit continues ``previous``, the checkpoint at its output; pure.

        Parameters
        ----------
        previous : Model or None
            The checkpoint (only its ``corpus``, ``params``, ``n_iter`` and ``converged``
            are read), or None.
        fingerprint : str
            The fingerprint of the corpus to fit.
        params : dict
            This fit's parameters as stored (:data:`RESUME_KEYS` and ``max_iter``).

        Returns
        -------
        bool
            True to resume (asked, with the same corpus and the same :data:`RESUME_KEYS`),
            False to start afresh (nothing there, or ``overwrite``).

        Raises
        ------
        OutputExistsError
            If a model is there and neither ``resume`` nor ``overwrite`` was asked.
        CheckpointMismatchError
            If a resume was asked of another corpus' or other parameters' checkpoint.
            Each with its remedies: this request replacing the output, and the continuation
            of what is there (the one nearest to what was asked first).
        """
        if previous is None or (self.overwrite and not self.resume):
            return False
        same_corpus = previous.corpus.get("fingerprint") == fingerprint
        recorded = recorded_params(previous)
        changed = {k: (recorded[k], params[k]) for k in RESUME_KEYS
                   if resume_value(k, recorded[k]) != resume_value(k, params[k])}
        if same_corpus and not changed and self.resume:
            return True
        init = recorded["init_from"]
        theirs = {**recorded, "init_from": init["path"] if isinstance(init, dict) else init,
                  "input": self.input if same_corpus else previous.corpus.get("path", "CORPUS")}

        def fix(say: str, action: str) -> Text:
            changes = theirs if action == "resume" else {}
            return f"{say}: " + self._fix(say, **{action: True}, **changes)

        detail = Text(", ").join(option(k) + f": {a!r} -> {b!r}" for k, (a, b) in changed.items())
        other = (f"{previous.corpus.get('path')!r} (fingerprint "
                 f"{previous.corpus.get('fingerprint', '?')[:12]}), not {{}} {self.input} "
                 f"(fingerprint {fingerprint[:12]})")
        if self.resume:
            found, fixes = (f"was fitted on {other.format('on')}", (
                fix("resume with the original corpus", "resume"),
                fix(f"start a new fit of {self.input}", "overwrite"),
            )) if not same_corpus else ("was written with other parameters (" + detail + ")", (
                fix("resume with the checkpoint's parameters", "resume"),
                fix("start the fit asked for", "overwrite")))
            raise CheckpointMismatchError(
                f"{self.output} " + found + ". To resolve this, " + Text(", or ").join(fixes)
                + " (or choose another " + option("output") + ")."
            )
        if same_corpus and not changed:
            found = f"this fit, stopped at iteration {previous.n_iter}"
            fixes = (fix("continue it", "resume"), fix("replace it", "overwrite"))
            if previous.converged or previous.n_iter >= params["max_iter"]:
                found, fixes = f"this fit, finished at iteration {previous.n_iter}", fixes[1:]
                if not previous.converged:  # at its max_iter: more iterations continue it
                    found += (" (" + option("resume", True) + " with a larger "
                              + option("max_iter") + " continues it)")
        else:
            found = (("a fit with other parameters (" + detail + ")") if same_corpus
                     else f"a fit of {other.format('of')}")
            fixes = (fix("replace it", "overwrite"), fix("continue that fit", "resume"))
        refuse_existing(self.output, found=found, remedies=Text(", or ").join(fixes))

    def execute(self, held: Output, opened: _Opened) -> Model:
        """Fit, checkpointing to ``held``; restart from the last checkpoint after a worker loss."""
        previous = opened.previous
        unsaved: list[Callable[[], None] | None] = [None]  # the last iteration's checkpoint
        try:
            for attempt in range(self.retries + 1):
                try:
                    return self._fit(held, opened, previous, unsaved)
                except cluster.worker_losses() as exc:
                    if attempt == self.retries or cluster.no_worker_left(exc):  # none to retry on
                        ours = previous is not None or held.identity() not in (None, opened.before)
                        again = None if ours else self._fix(overwrite=opened.before is not None)
                        raise cluster.workers_lost(self.output, attempt, exc,
                                                   self._fix(resume=True), again=again) from exc
                    if held.identity() not in (None, opened.before):
                        previous = load_checkpoint(self.output)  # continue our own checkpoint
                    cluster.log_retry(self.output, exc, attempt, self.retries)
                except Exception as exc:
                    if _device.is_out_of_memory(exc):
                        said = self._out_of_memory(held, opened, exc)
                        raise InsufficientMemoryError(said) from None
                    if not is_storage_failure(exc):
                        raise
                    error = storage_error(self.output, exc)  # the object store that failed
                    raise (storage_error(self.input, exc) if error is exc else error) from None
        except KeyboardInterrupt as exc:
            if isinstance(exc, Interrupted):
                raise
            if unsaved[0] is not None:  # Ctrl-C or SIGTERM: keep the last completed iteration
                with contextlib.suppress(Exception, KeyboardInterrupt):  # (U is m x r: seconds)
                    unsaved[0]()  # a second Ctrl-C, a failing store: the last checkpoint stays
            raise Interrupted(self._stopped(held, opened)) from exc
        raise AssertionError("unreachable")  # pragma: no cover

    def _fix(self, say: str = "", *, resume: bool = False, overwrite: bool = False,
             **changes: Any) -> Text:
        """The remedy a message names: this fit, changed, continuing or replacing the output."""
        return remedy(self.remedy(say, resume=resume, overwrite=overwrite, **changes))

    def _fit(self, held: Output, opened: _Opened, previous: Model | None,
             unsaved: list[Callable[[], None] | None]) -> Model:
        source, output, params = opened.source, self.output, opened.params
        held.remove_stale()  # the lock proves them a killed run's; never read
        state = None
        if previous is not None:
            state = previous.state(source.chunks)
            state.converged = bool(state.iteration > 0 and state.relative_change < self.tol)
            logger.info("resuming %s from iteration %d", output, state.iteration)
        corpus_info = {
            "path": absolute(self.input), "fingerprint": source.fingerprint,
            "shape": list(source.shape), "feature_scheme": source.feature_scheme,
            "tfidf": source.tfidf,
        }
        save = functools.partial(
            save_checkpoint, held, params=params, corpus=corpus_info, idf=source.idf,
            vocabulary=getattr(source, "vocabulary", None),  # a Corpus of that scheme
        )
        last_write = [_clock()]

        def on_state(s: solver.FitState) -> None:
            if self.callback is not None:
                self.callback(s)
            final = s.converged or s.iteration >= self.max_iter
            # iteration 0 of the stateless fit is not saved: its U_0 (random or svd) fills all
            # m rows, U_1 only the occurring features' (8 m r bytes against 8 k r), and
            # redoing it is the seed plus one pass
            if s.iteration == 0 and s.V is None:
                return
            unsaved[0] = functools.partial(save, s)  # a new state every iteration: s stays
            due = _clock() - last_write[0] >= self.checkpoint_interval
            if s.iteration % self.checkpoint_every == 0 and due and not final:
                save(s)  # U_k alone (and V_k, for a fit that keeps it)
                unsaved[0] = None
                last_write[0] = _clock()  # the interval counts fitting, not writing

        X = source.to_dask()
        client = graph.active_client()
        cluster.check_workers_see(client, inputs=(self.input,), outputs=(output,))
        x_bytes = cluster.stored_nbytes(source)
        hold, why = cluster.holds_in_memory(x_bytes, self.budget, client)
        logger.info(why)
        # the last pass's V (d r n bytes) beside a held X, for the final model: no pass to
        # recompute it, when both fit the budget (solver.fit's hold_V)
        v_bytes = self.n_components * source.shape[1] * self.config.dtype.itemsize
        hold_V = (hold and solver.holds_last_V(X, self.config)
                  and cluster.holds_in_memory(x_bytes + v_bytes, self.budget, client)[0])
        # the held chunks row-major (each pass then skips their renumbering and copy, the same
        # bits), when their larger form fits the budget beside the rest; the device takes CSC
        v_held = v_bytes if hold_V else 0
        extra = None if self.device != "cpu" else HELD_EXTRA if cluster.holds_in_memory(
            int(x_bytes * (1 + HELD_EXTRA)) + v_held, self.budget, client)[0] else 0.0
        check_memory = cluster.memory_check(
            source, self.n_components, dtype=self.dtype, split_every=self.split_every,
            client=client, held_bytes=int(x_bytes * (1 + (extra or 0))) + v_held if hold else 0,
            remedy=lambda r, s: self._fix(n_components=r, split_every=s,
                                          overwrite=self.overwrite or previous is not None),
        )
        if hold:  # read once and kept; else every pass reads each chunk as its task runs
            X = graph.hold(X, self.split_every, max_extra=extra)  # each where its block runs
        if self.device != "cpu":
            logger.info("chunk kernels on %s: every pass copies each chunk to the device "
                        "(streamed; X is not held in device memory)", self.device)
        scratch = ScratchV(output)  # V_k of a fit that keeps it (lam != 2): on disk
        with validated():  # the request validated every parameter
            try:
                final = solver.fit(
                    X, config=self.config, state=state, U0=opened.U0, callback=on_state,
                    spill=scratch, check_memory=check_memory, hold_V=hold_V,
                )
            except DataError as exc:  # the solver knows X, not the file: name it
                raise DataError(str(self.input) + ": " + message_of(exc)) from None
            except CheckpointMismatchError:
                if previous is None or "max_partials" not in previous.params:
                    raise
                # written before issue 29: its passes summed the partials in accumulation
                # chains, in an order this version's tree does not always reproduce, so the
                # recomputed objective missed the recorded one by rounding, not other data
                raise CheckpointMismatchError(
                    f"{output} is a checkpoint of an earlier version of sphdist, whose passes "
                    "summed their partials in accumulation chains (max_partials="
                    f"{previous.params['max_partials']}); this version sums them in another "
                    "order, and the fit cannot continue from it to the bit. To resolve this, "
                    "start the fit again: " + self._fix(overwrite=True)
                    + " (or choose another " + option("output") + ")."
                ) from None
        if final is not state or not open_model(output).has_embedding:
            t0 = time.perf_counter()  # V written chunk by chunk by the tasks that compute it
            save(final, V=solver.embedding(X, final, dtype=self.dtype, device=self.device))
            logger.info("wrote the embedding and committed %s in %.2fs", output,
                        time.perf_counter() - t0)
        scratch.remove()
        return open_model(output)

    def _out_of_memory(self, held: Output, opened: _Opened, exc: BaseException) -> str:
        """The message of a fit whose device ran out of memory: what is left, how to go on.

        The last complete checkpoint at the output (untouched: a checkpoint is committed
        whole or not at all) and the fits that resume it on the CPU or, once device memory
        is freed, on the device; or, before the first checkpoint, the fit to start again.
        """
        what = (f"the {self.device} device ran out of memory during the fit of {self.input} "
                f"({type(exc).__name__}: {str(exc).strip().splitlines()[0] if str(exc) else ''})")
        try:
            model = None if held.identity() in (None, opened.before) and (
                opened.previous is None) else load_checkpoint(self.output)
        except Exception:
            model = None
        if model is None:
            return (
                f"{what}; no checkpoint was written. To resolve this, run it on the CPU: "
                + self._fix(device='cpu', overwrite=self.overwrite)
                + ", or free its memory (`nvidia-smi`) and run it again: "
                + self._fix(overwrite=self.overwrite) + "."
            )
        return (
            f"{what}; {self.output} holds its checkpoint of iteration {model.n_iter}, intact. "
            "To resolve this, resume it on the CPU: " + self._fix(device='cpu', resume=True)
            + ", or free its memory (other processes on it: `nvidia-smi`) and resume there: "
            + self._fix(resume=True) + "."
        )

    def _stopped(self, held: Output, opened: _Opened) -> str:
        """Where a fit stopped by Ctrl-C is, and the fit that goes on from there."""
        output = self.output
        try:
            if opened.previous is None and held.identity() == opened.before:
                was = "does not exist" if opened.before is None else "is as it was"
                return ("the fit was interrupted (Ctrl-C) before its first checkpoint: nothing "
                        f"was written, {output} {was}. To resolve this, run it again: "
                        + self._fix(overwrite=self.overwrite) + ".")
            model = load_checkpoint(output)
        except Exception:  # the store fails, or a commit stopped between its renames
            model = None
        if model is None:  # a resume recovers an interrupted commit
            return (f"the fit was interrupted (Ctrl-C); {output} holds its last complete "
                    "checkpoint, if any. To resolve this, continue it: "
                    + self._fix(resume=True) + ".")
        if model.converged or model.n_iter >= self.max_iter:
            return (f"the fit was interrupted (Ctrl-C) after it committed {output}: it is "
                    f"complete, at iteration {model.n_iter}.")
        return (
            f"the fit was interrupted (Ctrl-C): {output} holds its checkpoint of iteration "
            f"{model.n_iter} of {self.max_iter}. To resolve this, continue it from there: "
            + self._fix(resume=True) + "."
        )


#: The clock of ``checkpoint_interval``, in seconds (a test's seam).
_clock = time.monotonic


def warm_start(
    init_from: str | os.PathLike[str], source: Any, input: Any, n_components: int
) -> np.ndarray:
    """The U of the model at ``init_from``, after checking it fits ``source`` and r.

    Parameters
    ----------
    init_from : path-like
        A ``model.zarr``.
    source : Corpus or DenseInput
        The corpus to fit.
    input : path-like
        Its path, for messages.
    n_components : int
        The r asked for.

    Returns
    -------
    ndarray of shape (m, r), float64

    Raises
    ------
    ParameterError
        If the model's r is not ``n_components``.
    CorpusMismatchError
        If the model was fitted in another feature space
        (:meth:`~sphdist.io.model.Model.check_compatible`).
    """
    previous = open_model(init_from)
    m, r, _ = previous.shape
    if r != n_components:
        raise ParameterError(
            option("init_from", init_from) + f" has r={r} components, but "
            + option("n_components", n_components) + " was asked. To resolve this, fit with "
            + option("n_components", r)
            + f", or warm-start from a model with {n_components} components."
        )
    previous.check_compatible(source, input, check_idf=False)
    return previous.U
