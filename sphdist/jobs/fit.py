"""The fit job: Spherical PCA of a stored corpus, checkpointed, resumable, retried.

A fit is planned, then run while it holds its output, once:

1. :func:`plan_fit` is pure: it validates the solver's
   :class:`~sphdist.core.params.FitConfig` against :data:`sphdist.core.params.PARAMS` and the
   job's :class:`~sphdist.jobs.params.JobSettings` against
   :data:`sphdist.jobs.params.JOB_PARAMS`, and returns a :class:`FitPlan` that carries both;
   nothing is locked, opened or written before.
2. :func:`open_fit` holds the output (:func:`sphdist.io.open_output`: its lock, taken before
   anything there is looked at, its staging and commits) for one ``with`` block, opens the
   input once, checks the parameters against its shape, reads the warm start and decides
   what to do with the output (a fresh fit, a resume of its checkpoint, or an error). It
   yields a :class:`Fit`.
3. :meth:`Fit.run` runs :func:`sphdist.core.solver.fit` on the active Dask scheduler (see
   :func:`sphdist.jobs.cluster.connect`) with the plan's
   :class:`~sphdist.core.params.FitConfig`, checkpointing to the output, and resumes from its
   own last checkpoint when a worker is lost (:attr:`~sphdist.jobs.params.JobSettings.retries`).

:func:`fit_corpus` does the three; ``sphdist fit`` opens the fit before it starts a cluster.
A second fit of the same output is refused with :class:`~sphdist.errors.OutputLockedError`
before it recovers, cleans up or writes anything.

A fit's decision to resume, start afresh or refuse is pure, and made in
:mod:`sphdist.jobs.params` (:func:`~sphdist.jobs.params.decide_output`: whether a checkpoint
belongs to this corpus and these parameters, :data:`RESUME_KEYS`), the commands its remedies
print by :func:`fit_remedy` (:mod:`sphdist.io._refit`); what a worker loss is, and its
messages, in :mod:`sphdist.jobs.cluster` (:func:`~sphdist.jobs.cluster.worker_losses`). Here
they are applied: the checkpoint read and resumed, the restart after a worker loss.

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
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import numpy as np

from sphdist.core import _device, graph, solver
from sphdist.errors import (
    CheckpointMismatchError,
    DataError,
    InsufficientMemoryError,
    Interrupted,
    OutputExistsError,
    ParameterError,
    option,
    remedy,
    template,
)
from sphdist.io import (
    Output,
    absolute,
    is_storage_failure,
    open_output,
    refuse_existing,
    storage_error,
)
from sphdist.io._refit import fit_remedy
from sphdist.io.corpus import open_input
from sphdist.io.model import (
    Model,
    ScratchV,
    load_checkpoint,
    open_model,
    save_checkpoint,
    u_sha256,
)
from sphdist.jobs import params as fit_params
from sphdist.jobs.cluster import (
    check_workers_see,
    holds_in_memory,
    log_retry,
    memory_check,
    no_worker_left,
    stored_nbytes,
    task_path,
    worker_losses,
    workers_lost,
)
from sphdist.jobs.params import FitConfig, JobSettings

__all__ = [
    "fit_corpus", "plan_fit", "FitPlan", "open_fit", "Fit", "prepare_fit", "warm_start",
    "fit_remedy", "RESUME_KEYS",
]

logger = logging.getLogger("sphdist")


#: Parameters that change the sequence of iterates: a checkpoint resumes only if they match
#: (:func:`sphdist.jobs.params.decide_output`).
RESUME_KEYS = fit_params.RESUME_KEYS  # the table's rows marked resume, and init_from


def _log_iteration(state: solver.FitState) -> None:
    logger.info(
        "iter %4d  objective %.10g  rel_change %.3e  %.2fs%s",
        state.iteration, state.objective[-1], state.relative_change, state.seconds[-1],
        "  (converged)" if state.converged else "",
    )


@dataclasses.dataclass(frozen=True)
class FitPlan:
    """A fit's validated parameters and settings (:func:`plan_fit`); reads nothing.

    Attributes
    ----------
    input, output : pathlib.Path or upath.UPath
        The corpus and the ``model.zarr`` to write, absolute (or URLs).
    config : FitConfig
        The solver's parameters, validated against the table (not yet against the corpus'
        shape), ``dtype`` a ``numpy.dtype``; what :func:`sphdist.core.solver.fit` is given.
    job : JobSettings
        The job's settings, validated, the memory budget in bytes (or None).
    """

    input: Path
    output: Path
    config: FitConfig
    job: JobSettings = JobSettings()  # noqa: RUF009  (frozen: shared safely)


_CALLER = "sphdist.jobs.fit.fit_corpus"  # who validates, in the messages
#: The default of the signatures here: :class:`~sphdist.jobs.params.JobSettings`' (frozen).
_JOB = JobSettings()


def plan_fit(
    input: str | os.PathLike[str],
    output: str | os.PathLike[str],
    config: FitConfig,
    job: JobSettings = _JOB,
) -> FitPlan:
    """Validate a fit's parameters and settings; reads and writes nothing.

    Everything a fit can refuse without its data is refused here, before its output is
    locked or anything is opened.

    Parameters
    ----------
    input, output : path-like
        As for :func:`fit_corpus`.
    config : FitConfig
        The solver's parameters.
    job : JobSettings, optional
        The job's settings (default: their defaults).

    Returns
    -------
    FitPlan

    Raises
    ------
    ParameterError
        If a value of ``config`` is outside :data:`sphdist.core.params.PARAMS`, or one of
        ``job`` outside :data:`sphdist.jobs.params.JOB_PARAMS` (or the memory budget is not
        a size).
    DeviceError
        With ``device="cuda"``, if CuPy or a CUDA device is missing
        (:func:`sphdist.core._device.check_device`).
    """
    config, job = config.checked(_CALLER), job.checked(_CALLER)
    if config.device == "cuda":  # before the output is locked or a cluster starts
        _device.check_device("cuda")
    return FitPlan(  # absolute here, once: the workers' working directories are their own
        input=task_path(input), output=task_path(output, output=True), config=config, job=job,
    )


@dataclasses.dataclass(frozen=True)
class Fit:
    """A fit holding its output, its input open and its output situation decided.

    Made by :func:`open_fit`, valid inside its ``with`` block.

    Attributes
    ----------
    plan : FitPlan
    out : Output
        The held output (:func:`sphdist.io.open_output`).
    source : Corpus or DenseInput
        The open input (:func:`sphdist.io.corpus.open_input`), opened once.
    params : dict
        What is stored with the model: the plan's
        :class:`~sphdist.core.params.FitConfig` (checked against the input's shape) as a dict,
        ``dtype`` by name, and ``init_from``.
    previous : Model or None
        The checkpoint to resume, or None for a fresh fit.
    U0 : ndarray of shape (m, r), float64, or None
        The warm start.
    before : object
        What was committed at the output when the fit opened it (after a recovery).
    """

    plan: FitPlan
    out: Output
    source: Any
    params: dict[str, Any]
    previous: Model | None
    U0: np.ndarray | None
    before: Any

    @property
    def input(self) -> Path:
        """The corpus (normalised once, by :func:`plan_fit`)."""
        return self.plan.input

    @property
    def output(self) -> Path:
        """The ``model.zarr`` written."""
        return self.out.path

    def run(
        self, callback: Callable[[solver.FitState], None] | None = _log_iteration, *,
        retries: int | None = None,
    ) -> Model:
        """Run the fit on the active Dask scheduler, checkpointing to the output.

        When a worker is lost in the middle of an iteration (killed, pre-empted, out of
        memory), data the iteration needs may be gone with it; the fit then resumes from
        the last checkpoint it committed (or starts again as it started, if none), which
        reaches bitwise the same U, V and objective history as an undisturbed run.

        Parameters
        ----------
        callback : callable or None
            Called with the solver state after the initialisation and every iteration.
        retries : int, optional
            Restarts allowed after a worker loss; default: the plan's
            (:attr:`~sphdist.jobs.params.JobSettings.retries`).

        Returns
        -------
        Model
            The final model, read back from the output.

        Raises
        ------
        ParameterError
            If ``retries`` < 0.
        WorkersLostError
            When workers are still lost after ``retries`` restarts (the cause is chained).
        StorageError
            If an object store holding the input or the output fails a request even after
            its client's retries; the last complete checkpoint stays readable.
        """
        if retries is None:
            retries = self.plan.job.retries
        else:
            fit_params.validate({"retries": retries}, "sphdist.jobs.fit.Fit.run",
                                fit_params.JOB_PARAMS)
        previous = self.previous
        for attempt in range(retries + 1):
            try:
                return self._attempt(previous, callback)
            except worker_losses() as exc:
                if attempt == retries or no_worker_left(exc):  # none left to retry on: stop
                    resume = _fix(self.input, self.output, self.params, resume=True,
                                  **_cadence(self.plan.job))
                    ours = previous is not None or self.out.identity() not in (None, self.before)
                    again = None if ours else _fix(  # no checkpoint to resume (issue 44)
                        self.input, self.output, self.params, overwrite=self.before is not None,
                        **_cadence(self.plan.job))
                    raise workers_lost(self.output, attempt, exc, resume, again=again) from exc
                if self.out.identity() not in (None, self.before):
                    previous = load_checkpoint(self.output)  # continue our own checkpoint
                log_retry(self.output, exc, attempt, retries)
        raise AssertionError("unreachable")  # pragma: no cover

    def _attempt(
        self, previous: Model | None, callback: Callable[[solver.FitState], None] | None
    ) -> Model:
        try:
            return self._fit(previous, callback)
        except worker_losses():
            raise  # run resumes
        except Exception as exc:
            if _device.is_out_of_memory(exc):
                raise InsufficientMemoryError(self.out_of_device_memory(exc)) from None
            if not is_storage_failure(exc):
                raise
            error = storage_error(self.output, exc)  # the object store that failed, named
            raise (storage_error(self.input, exc) if error is exc else error) from None

    def _fit(
        self, previous: Model | None, callback: Callable[[solver.FitState], None] | None
    ) -> Model:
        source, output, max_iter = self.source, self.output, self.params["max_iter"]
        self.out.remove_stale()  # the lock proves them a killed run's; never read
        state = None
        if previous is not None:
            state = previous.state(source.chunks)
            state.converged = bool(
                state.iteration > 0 and state.relative_change < self.params["tol"]
            )
            logger.info("resuming %s from iteration %d", output, state.iteration)
        corpus_info = {
            "path": absolute(self.input), "fingerprint": source.fingerprint,
            "shape": list(source.shape), "feature_scheme": source.feature_scheme,
            "tfidf": source.tfidf,
        }
        vocabulary = getattr(source, "vocabulary", None)  # a Corpus of the vocabulary scheme

        save = functools.partial(
            save_checkpoint, self.out, params=self.params, corpus=corpus_info,
            idf=source.idf, vocabulary=vocabulary,
        )

        job, last_write = self.plan.job, [_clock()]

        def on_state(s: solver.FitState) -> None:
            if callback is not None:
                callback(s)
            final = s.converged or s.iteration >= max_iter
            # iteration 0 of the stateless fit is not saved: its U_0 (random or svd) fills all
            # m rows, U_1 only the occurring features' (8 m r bytes against 8 k r), and
            # redoing it is the seed plus one pass
            first = s.iteration == 0 and s.V is None
            due = _clock() - last_write[0] >= job.checkpoint_interval
            if s.iteration % job.checkpoint_every == 0 and due and not final and not first:
                save(s)  # U_k alone (and V_k, for a fit that keeps it)
                last_write[0] = _clock()  # the interval counts fitting, not writing

        X = source.to_dask()
        client = graph.active_client()
        check_workers_see(client, inputs=(self.input,), outputs=(output,))
        budget, x_bytes = self.plan.job.memory_budget, stored_nbytes(source)
        hold, why = holds_in_memory(x_bytes, budget, client)
        logger.info(why)
        # the last pass's V (d r n bytes) beside a held X, for the final model: no pass to
        # recompute it, when both fit the budget (solver.fit's hold_V)
        v_bytes = (self.params["n_components"] * source.shape[1]
                   * np.dtype(self.params["dtype"]).itemsize)
        hold_V = (hold and solver.holds_last_V(X, self.plan.config)
                  and holds_in_memory(x_bytes + v_bytes, budget, client)[0])
        check_memory = memory_check(
            source, self.params["n_components"], dtype=self.params["dtype"],
            split_every=self.params["split_every"], client=client,
            held_bytes=(x_bytes + (v_bytes if hold_V else 0)) if hold else 0,
            remedy=lambda r, s: _fix(
                self.input, output, {**self.params, "n_components": r, "split_every": s},
                overwrite=self.plan.job.overwrite or previous is not None,
                **_cadence(self.plan.job),
            ),
        )
        if hold:  # read once and kept; else every pass reads each chunk as its task runs
            X = graph.hold(X, self.plan.config.split_every)  # each chunk where its block runs
        if self.params.get("device", "cpu") != "cpu":
            logger.info("chunk kernels on %s: every pass copies each chunk to the device "
                        "(streamed; X is not held in device memory)", self.params["device"])
        scratch = ScratchV(output)  # V_k of a fit that keeps it (lam != 2): on disk
        with fit_params.validated():  # plan_fit validated every parameter
            try:
                final = solver.fit(
                    X, config=self.plan.config, state=state, U0=self.U0, callback=on_state,
                    spill=scratch, check_memory=check_memory, hold_V=hold_V,
                )
            except DataError as exc:  # the solver knows X, not the file: name it
                raise DataError(f"{self.input}: {template(exc)}") from None
            except CheckpointMismatchError:
                if previous is None or "max_partials" not in previous.params:
                    raise
                # written before issue 29: its passes summed the partials in accumulation
                # chains, in an order this version's tree does not always reproduce, so the
                # recomputed objective missed the recorded one by rounding, not other data
                asked = _fix(self.input, output, self.params, overwrite=True,
                             **_cadence(self.plan.job))
                raise CheckpointMismatchError(
                    f"{output} is a checkpoint of an earlier version of sphdist, whose passes "
                    f"summed their partials in accumulation chains (max_partials="
                    f"{previous.params['max_partials']}); this version sums them in another "
                    "order, and the fit cannot continue from it to the bit. To resolve this, "
                    f"start the fit again: {asked} (or choose another {option('output')})."
                ) from None
        if final is not state or not open_model(output).has_embedding:
            t0 = time.perf_counter()
            # the final model: V written chunk by chunk by the tasks that compute it
            save(final, V=solver.embedding(X, final, dtype=self.params["dtype"],
                                           device=self.params.get("device", "cpu")))
            logger.info("wrote the embedding and committed %s in %.2fs", output,
                        time.perf_counter() - t0)
        scratch.remove()
        return open_model(output)

    def out_of_device_memory(self, exc: BaseException) -> str:
        """The message of a fit whose device ran out of memory: what is left, how to go on.

        Parameters
        ----------
        exc : BaseException
            The device's error (:func:`sphdist.core._device.is_out_of_memory`).

        Returns
        -------
        str
            The last complete checkpoint at the output (untouched: a checkpoint is committed
            whole or not at all) and the commands that resume it on the CPU or, once device
            memory is freed, on the device; or, before the first checkpoint, the command that
            starts the fit again.
        """
        output, device = self.output, self.params.get("device", "cpu")
        command = functools.partial(_fix, self.input, output,
                                    **_cadence(self.plan.job))
        cpu = {**self.params, "device": "cpu"}
        what = (f"the {device} device ran out of memory during the fit of {self.input} "
                f"({type(exc).__name__}: {str(exc).strip().splitlines()[0] if str(exc) else ''})")
        try:
            model = None if self.out.identity() in (None, self.before) and (
                self.previous is None) else load_checkpoint(output)
        except Exception:
            model = None
        free = ("free its memory (other processes on it: `nvidia-smi`) and resume there: "
                if model is not None else "free its memory (`nvidia-smi`) and run it again: ")
        if model is None:
            return (
                f"{what}; no checkpoint was written. To resolve this, run it on the CPU: "
                f"{command(cpu, overwrite=self.plan.job.overwrite)}, or {free}"
                f"{command(self.params, overwrite=self.plan.job.overwrite)}."
            )
        return (
            f"{what}; {output} holds its checkpoint of iteration {model.n_iter}, intact. To "
            f"resolve this, resume it on the CPU: {command(cpu, resume=True)}, or {free}"
            f"{command(self.params, resume=True)}."
        )

    def stopped(self) -> str:
        """Where a fit stopped by Ctrl-C is, and the command that goes on from there."""
        output, max_iter = self.output, self.params["max_iter"]
        command = functools.partial(_fix, self.input, output, self.params,
                                    **_cadence(self.plan.job))
        if self.previous is None and self.out.identity() == self.before:
            return (
                "the fit was interrupted (Ctrl-C) before its first checkpoint: nothing was "
                f"written, {output} {'does not exist' if self.before is None else 'is as it was'}"
                f". To resolve this, run it again: {command(overwrite=self.plan.job.overwrite)}."
            )
        try:
            model = load_checkpoint(output)
        except Exception:  # e.g. a commit stopped between its renames: a resume recovers it
            model = None
        if model is None:
            return (
                f"the fit was interrupted (Ctrl-C) while it committed a checkpoint of {output}. "
                "To resolve this, continue it from its last complete checkpoint: "
                f"{command(resume=True)}."
            )
        if model.converged or model.n_iter >= max_iter:
            return (f"the fit was interrupted (Ctrl-C) after it committed {output}: it is "
                    f"complete, at iteration {model.n_iter}.")
        return (
            f"the fit was interrupted (Ctrl-C): {output} holds its checkpoint of iteration "
            f"{model.n_iter} of {max_iter}. To resolve this, continue it from there: "
            f"{command(resume=True)}."
        )


@contextlib.contextmanager
def open_fit(plan: FitPlan) -> Iterator[Fit]:
    """Hold ``plan``'s output for a block, open its input once and decide what to do there.

    The output's lock is taken before anything there is looked at and released when the
    block ends. A Ctrl-C inside the block is raised again as
    :class:`~sphdist.errors.Interrupted`, saying where the fit stopped (the last committed
    checkpoint) and the command that continues it.

    Parameters
    ----------
    plan : FitPlan

    Yields
    ------
    Fit

    Raises
    ------
    OutputLockedError
        If another process is writing the output.
    ParameterError
        If ``n_components`` exceeds the corpus' shape, or another parameter does not fit it.
    OutputExistsError, CheckpointMismatchError, CorpusMismatchError, DataError
        See :func:`fit_corpus`.
    """
    # before anything at output is looked at; never an input, nor in one, nor another kind
    with open_output(plan.output, kind="model", inputs=(plan.input, plan.job.init_from)) as out:
        fit = _open(plan, out)
        try:
            yield fit
        except KeyboardInterrupt as exc:
            if isinstance(exc, Interrupted):
                raise
            try:
                said = fit.stopped()
            except Exception:  # the store fails: say what is sure
                resume = _fix(fit.input, fit.output, fit.params, resume=True,
                              **_cadence(plan.job))
                said = (f"the fit was interrupted (Ctrl-C); {fit.output} holds its last "
                        f"complete checkpoint, if any. To resolve this, continue it: "
                        f"{resume}.")
            raise Interrupted(said) from exc


def _open(plan: FitPlan, out: Output) -> Fit:
    source = open_input(plan.input)
    source.require_documents()
    solver.check_shape(plan.config, source.shape)  # the table's constraints: plan_fit
    values = plan.config.values()
    values["dtype"] = values["dtype"].name  # stored by name
    U0, init_from = None, plan.job.init_from
    if init_from is not None:
        U0 = warm_start(init_from, source, plan.input, values["n_components"])
    values["init_from"] = None if U0 is None else {
        "path": absolute(init_from), "u_sha256": u_sha256(U0),
    }
    previous = _checkpoint_to_resume(plan.input, out, source, values, plan.job.resume,
                                     plan.job.overwrite, plan.job)
    return Fit(plan=plan, out=out, source=source, params=values, previous=previous, U0=U0,
               before=out.identity())  # after a recovery, before any write


def prepare_fit(
    input: str | os.PathLike[str], output: str | os.PathLike[str], **kwargs: Any
) -> contextlib.AbstractContextManager[Fit]:
    """``open_fit(plan_fit(input, output, config, job))`` of keywords: a context manager.

    Parameters
    ----------
    input, output : path-like
        As for :func:`fit_corpus`.
    **kwargs
        ``n_components`` and the other fields of :class:`~sphdist.core.params.FitConfig` and of
        :class:`~sphdist.jobs.params.JobSettings` (those not given take their defaults).

    Raises
    ------
    TypeError
        If a keyword is neither, or ``n_components`` is missing.
    ParameterError, DeviceError
        As :func:`plan_fit`, at the call; the others of :func:`open_fit` when the block
        is entered.
    """
    return open_fit(plan_fit(input, output, *fit_params.keywords("prepare_fit", kwargs)))


def fit_corpus(
    input: str | os.PathLike[str],
    output: str | os.PathLike[str],
    config: FitConfig | None = None,
    job: JobSettings | None = None,
    *,
    callback: Callable[[solver.FitState], None] | None = _log_iteration,
    **kwargs: Any,
) -> Model:
    """Fit Spherical PCA to a stored corpus, checkpointing to ``output``.

    :func:`plan_fit`, then :meth:`Fit.run` inside :func:`open_fit`.

    Parameters
    ----------
    input : path-like
        A ``corpus.zarr`` or a dense 2-D zarr array (see :mod:`sphdist.io.corpus`).
    output : path-like
        The ``model.zarr`` to write (see :mod:`sphdist.io.model`).
    config : FitConfig, optional
        The solver's parameters (:class:`~sphdist.core.params.FitConfig`); without it, its
        fields as keywords (below), as before: ``fit_corpus(input, output, n_components=20,
        max_iter=50)``.
    job : JobSettings, optional
        How the job runs (:class:`~sphdist.jobs.params.JobSettings`: ``checkpoint_every``,
        ``checkpoint_interval``, ``resume``, ``overwrite``, ``init_from``, ``memory_budget``,
        ``retries``); without it, its fields as keywords.
    callback : callable or None
        Called with the solver state after every iteration; default logs one line
        (iteration, objective, relative change, seconds) to the ``sphdist`` logger.
    **kwargs
        The fields of ``config`` and ``job`` when they are not given, described here:
    n_components : int
        r, ``1 <= r <= min(m, n)``.
    lam, mu, max_iter, tol, init, n_power_iter, split_every, dtype, polar
        Solver parameters, see :func:`sphdist.core.solver.fit`; constraints and defaults are
        those of :data:`sphdist.core.params.PARAMS`.
    partials, accelerate
        As well (the extrapolated U-step is on by default).
    device : {"cpu", "cuda"}, default "cpu"
        Where the chunk kernels run (:mod:`sphdist.core._device`); not a resume parameter:
        a checkpoint written on one device resumes on the other (the model format is one).
    random_state : int or None, default 0
        Seed of the initialisation (stored with the model). 0, as for
        :class:`sphdist.SphericalPCA` and ``sphdist fit``: a checkpointed fit that restarts
        (``retries``) or is rerun from its stored parameters must reach the same
        iterates, which a fresh draw (None) would not.
    checkpoint_every : int, default 1
        Write the model every this many iterations (and always at the end), once
        ``checkpoint_interval`` has passed since the last write.
    checkpoint_interval : float, default 60.0
        In seconds: the least time of fitting between two checkpoints (since the last write,
        or the start of the fit); 0 writes every ``checkpoint_every`` iterations. A fit that
        ends sooner writes only its final model. Which iterations are written changes no bit
        of the result: a resume continues any of them bitwise.
    resume : bool, default False
        Continue from the checkpoint at ``output`` if there is one (else start afresh). The
        resumed run reaches the same U, V and objective history as an uninterrupted one.
    overwrite : bool, default False
        Replace an existing ``output`` when not resuming.
    init_from : path-like, optional
        A ``model.zarr`` whose U (m, r) is the warm start U_0 (orthonormalised by its polar
        factor, :func:`sphdist.core.solver.initialize`); ``init`` and ``random_state`` are then not
        used. Its feature space must be the corpus' (same feature scheme; same vocabulary when
        both have one); the idf may differ (a refit on newer documents). Recorded in the
        parameters as ``init_from`` (the sha256 of that U), so ``resume`` continues only the
        same warm start.
    memory_budget : int or str, default "auto"
        The most memory X may take, in bytes or as a size (``"4GiB"``); X (its CSC values,
        indices and pointers, :func:`sphdist.jobs.cluster.stored_nbytes`) is read once and
        held in memory when it fits, else streamed from the store chunk by chunk every
        iteration (the result is bitwise the same). "auto" (or None): a quarter of the memory
        available to this process, or of the workers' summed memory limits on a cluster
        (:func:`sphdist.jobs.cluster.holds_in_memory`); 0 always streams.
    retries : int, default 3
        Restarts from the last checkpoint after a worker loss (see :meth:`Fit.run`).

    Returns
    -------
    Model
        The final model, read back from ``output``.

    See Also
    --------
    Fit.run : Resume from the last checkpoint when a worker is lost, up to ``retries``
        times.

    Raises
    ------
    TypeError
        If a keyword is no field of ``config`` or ``job``, ``n_components`` is missing, or
        both a ``config`` and keywords are given.
    OutputExistsError
        If ``output`` exists and neither ``resume`` nor ``overwrite`` is set.
    OutputLockedError
        If another process is writing ``output`` (``overwrite`` does not take it over).
    WorkersLostError
        When workers are still lost after ``retries`` restarts.
    DataError
        If every document of ``input`` is empty (nothing to fit).
    CheckpointMismatchError
        If the checkpoint at ``output`` was written for another corpus or other parameters.
    CorpusMismatchError
        If ``init_from`` was fitted in another feature space.
    DeviceError
        With ``device="cuda"``, if CuPy or a CUDA device is missing (before the output is
        touched).
    InsufficientMemoryError
        If the device runs out of memory during the fit; the last checkpoint is intact and
        the message holds the commands that resume it (on the CPU, or on the device).
    ParameterError, DataError, CorpusFormatError, InputNotFoundError, ModelFormatError
        For invalid parameters or input (``ParameterError`` also when the r of ``init_from``
        is not ``n_components``).
    """
    if config is None and job is None:
        config, job = fit_params.keywords("fit_corpus", kwargs)
    elif kwargs:
        raise TypeError(f"fit_corpus() takes a FitConfig and JobSettings or their fields as "
                        f"keywords, not both: {sorted(kwargs)}")
    if config is None:
        raise TypeError("fit_corpus() missing its FitConfig (config=FitConfig(...))")
    with open_fit(plan_fit(input, output, config, JobSettings() if job is None else job)) as fit:
        return fit.run(callback)


def _checkpoint_to_resume(
    input: Any, out: Output, source: Any, params: dict[str, Any], resume: bool,
    overwrite: bool, job: JobSettings,
) -> Model | None:
    """The checkpoint at ``output`` to resume, None for a fresh fit, or why neither.

    The output's interrupted commit put back and its checkpoint read, then
    :func:`~sphdist.jobs.params.decide_output`; a refusal is raised with its remedies
    (:func:`fit_remedy`).
    """
    previous = load_checkpoint(out, recover=True)  # this fit is its writer: a commit put back
    decision = fit_params.decide_output(previous, source.fingerprint, input, params,
                                        resume=resume, overwrite=overwrite)
    if decision.error is None:
        return previous if decision.action == "resume" else None
    remedies = ", or ".join(
        "{}: {}".format(r.say, _fix(
            r.input, out.path, r.params, resume=r.action == "resume",
            overwrite=r.action == "overwrite", say=r.say, **_cadence(job),
        )) for r in decision.remedies
    )
    if decision.error is OutputExistsError:  # the one wording, with the fit's remedies
        refuse_existing(out.path, found=decision.found, remedies=remedies)
    raise decision.error(f"{out.path} {decision.found}. To resolve this, {remedies} "
                         f"(or choose another {option('output')}).")


def _fix(*args: Any, **kwargs: Any) -> str:
    """:func:`fit_remedy` of the arguments, as the marker a message carries it in."""
    return remedy(fit_remedy(*args, **kwargs))


#: The clock of ``checkpoint_interval``, in seconds (a test's seam).
_clock = time.monotonic


def _cadence(job: JobSettings) -> dict[str, Any]:
    """The checkpoint settings of ``job`` not at their defaults, keywords of :func:`fit_remedy`."""
    return {name: getattr(job, name) for name in ("checkpoint_every", "checkpoint_interval")
            if getattr(job, name) != fit_params.JOB_PARAMS[name].default}


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
            f"{option('init_from', init_from)} has r={r} components, but "
            f"{option('n_components', n_components)} was asked. To resolve this, fit with "
            f"{option('n_components', r)}, or warm-start from a model with {n_components} "
            "components."
        )
    previous.check_compatible(source, input, check_idf=False)
    return previous.U
