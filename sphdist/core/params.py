"""The parameters of a Spherical PCA fit, each defined once: constraint, default, help.

:data:`PARAMS` is the one table the fit paths read. :class:`FitConfig` is a fit's parameters,
built once from it (:meth:`FitConfig.build`: the table's defaults, validated) and passed down
to every function of the solver and the graph; :class:`sphdist.SphericalPCA` derives its
``_parameter_constraints`` from the table, and ``sphdist fit`` its option types and help text.
A row's :attr:`Param.resume` says whether a checkpoint resumes only with the same value
(:data:`RESUME_PARAMS`). The fit job's own settings are :data:`sphdist.jobs.params.JOB_PARAMS`.

The table is plain data: each row's :attr:`Param.spec` is made of :class:`Range` (a number in
an interval), :class:`Choice` (one of some words), ``None``, ``"boolean"`` and types, so that
the command line reads names, defaults, help and ranges without importing scikit-learn. A value
is valid when it satisfies one item of its spec (:func:`accepts`); :func:`validate` says which
value is not, in scikit-learn's words (those of its ``_parameter_constraints`` checks: the
estimators of :mod:`sphdist.methods` and :mod:`sphdist._validation` use them), and raises
:class:`sphdist._validation.InvalidParameterValueError`.

Validation follows scikit-learn's ``prefer_skip_nested_validation``: whoever validated the
parameters runs the solver inside :func:`sphdist._validation.validated`, and
:meth:`FitConfig.build` then does not validate them again (only ``n_components`` against the
shape of X, which depends on the data: :func:`sphdist.core.solver.check_params`).

References
----------
.. [1] Liu, K., Li, Q., Wang, H. and Tang, G. (2019). Spherical Principal Component Analysis. SDM.
   (``lam``: Eq. 3.12, ``mu``: Eq. 3.11.)
.. [2] Sun, D., Ding, C., Luo, B. and Tang, J. (2011). Angular Decomposition. IJCAI.
   (``init="svd"``: step V0.)
"""

from __future__ import annotations

import dataclasses
import functools
import math
import sys
import warnings
from collections.abc import Callable, Mapping, Sequence
from numbers import Integral, Real
from typing import Any

import numpy as np

from sphdist.errors import option

__all__ = [
    "PARAMS", "SOLVER_PARAMS", "RESUME_PARAMS", "STEP_MODES", "MAX_STEP", "POLAR_METHODS",
    "PARTIAL_FORMATS", "DEVICES", "RENAMED", "Param", "Range", "Choice", "SolverParameters",
    "FitConfig", "accepts",
    "validate", "defaults", "describe", "current_names",
]

#: Step-size modes of ``lam`` and ``mu`` (see :mod:`sphdist.core.solver`).
STEP_MODES = ("exact", "palm", "theory")
#: Routes of the U-step's polar factor: :data:`sphdist.core.kernels.POLAR_METHODS`.
POLAR_METHODS = ("svd", "gram", "auto")
#: Formats of the X V^T block partials: :data:`sphdist.core.partials.PARTIAL_FORMATS`.
PARTIAL_FORMATS = ("auto", "rows", "dense")
#: Devices of the chunk kernels: :data:`sphdist.core._device.DEVICES`.
DEVICES = ("cpu", "cuda")


@dataclasses.dataclass(frozen=True)
class Range:
    """A number in an interval (scikit-learn's ``Interval``, booleans refused).

    Attributes
    ----------
    type : type
        ``numbers.Integral`` (an int; booleans refused) or ``numbers.Real`` (a float).
    left, right : float or None
        The ends; None: unbounded.
    closed : {"left", "right", "both", "neither"}
        Which ends belong to the interval.

    Examples
    --------
    >>> str(Range(Real, 2.0, 2**52, "both"))
    'a float in the range [2.0, 4503599627370496.0]'
    >>> Range(Integral, 1, None, "left").accepts(True)
    False
    """

    type: type
    left: float | None
    right: float | None
    closed: str

    def __str__(self) -> str:
        """scikit-learn's words for its ``Interval`` (``Interval.__str__``)."""
        integral = self.type is Integral
        left: Any = "-inf" if self.left is None else self.left
        right: Any = "inf" if self.right is None else self.right
        if not integral and isinstance(self.left, Real):
            left = float(left)
        if not integral and isinstance(self.right, Real):
            right = float(right)
        return (
            f"{'an int' if integral else 'a float'} in the range "
            f"{'[' if self.closed in ('left', 'both') else '('}{left}, "
            f"{right}{']' if self.closed in ('right', 'both') else ')'}"
        )

    def accepts(self, value: Any) -> bool:
        """Whether ``value`` is a number of :attr:`type` (not a bool, not NaN) in the interval."""
        if isinstance(value, (bool, np.bool_)) or not isinstance(value, self.type):
            return False
        if not isinstance(value, Integral) and np.isnan(value):
            return False
        left = -math.inf if self.left is None else self.left
        right = math.inf if self.right is None else self.right
        above = value >= left if self.closed in ("left", "both") else value > left
        below = value <= right if self.closed in ("right", "both") else value < right
        return bool(above and below)


@dataclasses.dataclass(frozen=True)
class Choice:
    """One of some words (scikit-learn's ``StrOptions``).

    Attributes
    ----------
    options : frozenset of str
        The words.
    dtype : bool, default False
        The words are float dtypes, also given as a NumPy type or ``numpy.dtype``.

    Examples
    --------
    >>> str(Choice(frozenset({"svd", "random"})))
    "one of 'random', 'svd'"
    >>> Choice(frozenset({"float32"}), dtype=True).accepts(np.float32)
    True
    """

    options: frozenset[str]
    dtype: bool = False

    def __str__(self) -> str:
        """The words, sorted, as :func:`sphdist._validation.describe` writes them."""
        return "one of " + ", ".join(map(repr, sorted(self.options)))

    def accepts(self, value: Any) -> bool:
        """Whether ``value`` is one of the words (for dtypes: ``numpy.dtype(value)``'s name)."""
        if not self.dtype:
            return isinstance(value, str) and value in self.options
        try:
            return np.dtype(value).name in self.options
        except TypeError:
            return False


def _type_name(kind: type) -> str:
    """A type as scikit-learn's messages name it (``_param_validation._type_name``)."""
    return kind.__qualname__ if kind.__module__ == "builtins" else (
        f"{kind.__module__}.{kind.__qualname__}"
    )


def accepts(spec: Sequence[Any], value: Any) -> bool:
    """Whether ``value`` satisfies one item of ``spec``.

    Parameters
    ----------
    spec : sequence
        :class:`Range`, :class:`Choice`, ``None`` (the value None), ``"boolean"`` (a bool or
        ``numpy.bool_``) and types (an instance of it).

    Returns
    -------
    bool

    Examples
    --------
    >>> accepts(PARAMS["chunk_size"].spec, None), accepts(PARAMS["chunk_size"].spec, 0)
    (True, False)
    """
    for item in spec:
        if isinstance(item, (Range, Choice)):
            ok = item.accepts(value)
        elif item is None:
            ok = value is None
        elif item == "boolean":
            ok = isinstance(value, (bool, np.bool_))
        else:
            ok = isinstance(value, item)
        if ok:
            return True
    return False


def describe(spec: Sequence[Any]) -> str:
    """The values satisfying one item of ``spec``, in scikit-learn's words.

    Examples
    --------
    >>> describe(PARAMS["lam"].spec)
    "a float in the range [2.0, 4503599627370496.0] or one of 'exact', 'palm', 'theory'"
    >>> describe(PARAMS["accelerate"].spec)
    "an instance of 'bool' or an instance of 'numpy.bool'"
    """
    words = []
    for item in spec:
        if isinstance(item, (Range, Choice)):
            words.append(str(item))
        elif item is None:
            words.append("None")
        elif item == "boolean":
            words.append(f"an instance of 'bool' or an instance of {_type_name(np.bool_)!r}")
        else:
            words.append(f"an instance of {_type_name(item)!r}")
    return " or ".join(words)


@dataclasses.dataclass(frozen=True)
class Param:
    """One fit parameter.

    Attributes
    ----------
    name : str
        Keyword of :func:`sphdist.core.solver.fit` and :class:`sphdist.SphericalPCA`.
    spec : tuple
        What the value may be, as plain data (:class:`Range`, :class:`Choice`, ``None``,
        ``"boolean"``, types); the value must satisfy one (:func:`accepts`).
    default : object
        The default of the estimator, the solver and the fit job (``sphdist fit`` may
        show another where it says so).
    help : str
        One line, also the help of the ``sphdist fit`` option.
    resume : bool, default False
        The value changes the sequence of iterates, so a checkpoint resumes only with the
        value it was written with (:data:`RESUME_PARAMS`).
    """

    name: str
    spec: tuple[Any, ...]
    default: Any
    help: str
    resume: bool = False


def _at_least(low: int) -> Range:
    """An integer >= ``low``."""
    return Range(Integral, low, None, "left")


def _finite(left: float) -> Range:
    return Range(Real, left, math.inf, "left")


#: Largest fixed ``lam`` and ``mu``: 2**52 = 1 / eps(float64) (4.5e15).
#:
#: Above it a step computes nothing more: in the V-step ``q = 2 U^T x_j + (lam - 2) v_j`` (Liu
#: et al. 2019, Eq. 3.12) the data term of a unit-norm document, ``|2 U^T x_j| <= 2``, is then
#: within a couple of ulps of the proximal term (``(lam - 2) |v_ij| <= lam``, whose ulp reaches
#: ``lam * eps = 1`` at the bound), so ``v_j`` moves by rounding alone. ``mu`` takes the same
#: bound: the data term of the U-step's ``M = 2 (X V^T - U V V^T) + mu U`` (Eq. 3.11) grows
#: with the number of documents, so it still counts at 2**52. What a larger value does
#: risk is overflow: ``||q||^2 <= (lam + 2 ||U^T x_j||)^2`` leaves float32 above ~1.8e19 (the
#: ``dtype="float32"`` V-step) and float64 above ~1.3e154, and the Gram route of the polar
#: factor squares ``mu`` (``M^T M``); ``lam=1e160`` then made the objective rise and flagged
#: most documents degenerate, ``mu=1e200`` stopped the fit with a LinAlgError. Up to 2**52
#: every step stays finite in both compute dtypes. ``"theory"`` (L_c ~ 2 n) is not bounded.
MAX_STEP = float(2**52)


def _step(left: float) -> Range:
    return Range(Real, left, MAX_STEP, "both")


#: Every parameter of a Spherical PCA fit, in the order of the estimator's signature.
PARAMS: dict[str, Param] = {p.name: p for p in (
    Param("n_components", (_at_least(1),), 2,
          "r, the dimension of the embedding; at most min(features, documents).", resume=True),
    Param("lam", (_step(2.0), Choice(frozenset(STEP_MODES))), "exact",
          "Proximal parameter of the V-step (Liu et al. 2019, Eq. 3.12); at most 2**52 (beyond, "
          "the step leaves V as it is, to rounding, and its arithmetic can overflow).",
          resume=True),
    Param("mu", (_step(0.0), Choice(frozenset(STEP_MODES))), "exact",
          "Proximal parameter of the U-step (Liu et al. 2019, Eq. 3.11); exact: U = polar(X V^T); "
          "at most 2**52, as lam.", resume=True),
    Param("max_iter", (_at_least(0),), 100, "Maximum iterations after the initialisation."),
    Param("tol", (_finite(0.0),), 1e-4,
          "Stop when the relative objective change |f_{k-1} - f_k| / |f_{k-1}| is below this."),
    Param("init", (Choice(frozenset({"random", "svd"})),), "random",
          "Initial U: Haar-random, or the leading left singular vectors (Sun et al. 2011, V0).",
          resume=True),
    Param("random_state", (Range(Integral, 0, 2**32 - 1, "both"),
                           np.random.RandomState, None), 0,
          "Seed of the initialisation; the iterations are deterministic.", resume=True),
    Param("n_power_iter", (_at_least(0),), 4, "Power iterations of init='svd'.", resume=True),
    Param("chunk_size", (_at_least(1), None), None,
          "Samples per chunk of NumPy / SciPy input (stored corpora keep their chunks)."),
    Param("split_every", (_at_least(2),), 8, "Fan-in of the reduction tree of the partials.",
          resume=True),
    Param("dtype", (Choice(frozenset({"float64", "float32"}), dtype=True),), "float64",
          "Compute dtype of U^T X and of V; partials, objective and U stay float64.", resume=True),
    Param("polar", (Choice(frozenset(POLAR_METHODS)),), "auto",
          "Route of the U-step's polar factor (auto: the r x r Gram matrix when m >= 64 r).",
          resume=True),
    Param("partials", (Choice(frozenset(PARTIAL_FORMATS)),), "auto",
          "Format of the X V^T block partials (bitwise the same result; auto moves fewer bytes)."),
    Param("accelerate", ("boolean",), True,
          "Extrapolated exact U-step with a monotone safeguard (Ang and Gillis 2019): 14-20% "
          "fewer passes to tol; no effect unless lam and mu are exact.", resume=True),
    Param("device", (Choice(frozenset(DEVICES)),), "cpu",
          "Where the chunk kernels (U^T X, the V-step, the partial products) run: cpu, or "
          "cuda (CuPy, pip install 'sphdist[gpu]'); the U-step and checkpoints stay on the host "
          "in float64, so a fit resumes on either device."),
)}

#: Old spellings of parameters: old name -> name of :data:`PARAMS`. Keywords with an old name are
#: accepted for one release with a ``FutureWarning`` (:func:`current_names`); models and
#: checkpoints that stored one are read under the new name, so they still resume.
#: ``init_n_iter`` (before 2026-11) is ``n_power_iter``, the name of the angular methods and of
#: :func:`dask.array.linalg.svd_compressed`.
RENAMED = {"init_n_iter": "n_power_iter"}

#: The parameters :func:`sphdist.core.solver.fit` takes (all but the estimator's chunk_size).
SOLVER_PARAMS = tuple(name for name in PARAMS if name != "chunk_size")

#: The parameters a checkpoint resumes only with the same value of (:attr:`Param.resume`).
RESUME_PARAMS = tuple(name for name, param in PARAMS.items() if param.resume)


def validate(
    values: Mapping[str, Any], caller: str, table: Mapping[str, Param] = PARAMS
) -> None:
    """Check every value against its row of ``table``, in the order of ``values``.

    Parameters
    ----------
    values : mapping of str to object
        Parameter name -> value; names not in ``table`` are not checked.
    caller : str
        Who validates (``"SphericalPCA"``, ``"sphdist.core.solver.fit"``), for the message.
    table : mapping of str to Param, default PARAMS
        The parameter table.

    Raises
    ------
    sphdist._validation.InvalidParameterValueError
        A :class:`~sphdist.errors.ParameterError` (and scikit-learn's
        ``InvalidParameterError``) naming the first invalid value and its valid range, in
        scikit-learn's words: ``The 'lam' parameter of ... must be ... Got lam=1.5 instead.``
    """
    for name, value in values.items():
        if name in table and not accepts(table[name].spec, value):
            # scikit-learn (its InvalidParameterError is a base): only a refused value loads it
            from sphdist._validation import InvalidParameterValueError

            raise InvalidParameterValueError(
                f"The {name!r} parameter of {caller} must be {describe(table[name].spec)}. " "Got "
                + option(name, value) + " instead. To resolve this, pass a value in that range."
            )


def current_names(values: Mapping[str, Any], caller: str | None = None) -> dict[str, Any]:
    """``values`` with each old spelling of :data:`RENAMED` replaced by its name.

    Parameters
    ----------
    values : mapping of str to object
        Parameter name -> value: keyword arguments, or the ``params`` a model stored.
    caller : str, optional
        Who was called with ``values`` as keyword arguments: an old name then warns. None:
        ``values`` were stored by an older version (read silently).

    Returns
    -------
    dict of str to object
        The same values, in the same order, under the names of :data:`PARAMS`.

    Warns
    -----
    FutureWarning
        With ``caller``, for each old name (accepted for one release).

    Raises
    ------
    TypeError
        If a value is given under both spellings.

    Examples
    --------
    >>> current_names({"init": "svd", "init_n_iter": 2})
    {'init': 'svd', 'n_power_iter': 2}
    """
    out: dict[str, Any] = {}
    for name, value in values.items():
        new = RENAMED.get(name)
        if new is None:
            out[name] = value
            continue
        if new in values:
            raise TypeError(f"{caller or 'params'} got both {name!r} and {new!r}; pass {new!r}")
        if caller is not None:
            warnings.warn(
                f"{caller}: {name!r} was renamed {new!r} and is accepted until the next "
                f"release; pass {new}={value!r}.", FutureWarning, stacklevel=3,
            )
        out[new] = value
    return out


def defaults(names: Sequence[str] = SOLVER_PARAMS) -> dict[str, Any]:
    """The table's defaults of ``names``, as a dict."""
    return {name: PARAMS[name].default for name in names}


@dataclasses.dataclass(frozen=True, kw_only=True)
class SolverParameters:
    """The solver's parameters as fields: one per name of :data:`SOLVER_PARAMS`, keywords.

    Each field's default is its row's of :data:`PARAMS` (``n_components`` has none: a fit
    says its r). Declared once, for :class:`FitConfig` and for the fit job's request
    (:class:`sphdist.jobs.fit.FitRequest`), whose fields they are too.

    Attributes
    ----------
    n_components : int
        r.
    lam, mu : float or {"exact", "palm", "theory"}
        Step sizes of Eq. 3.12 and Eq. 3.11 (:mod:`sphdist.core.solver`).
    max_iter : int
        Iterations after the initialisation, at most.
    tol : float
        Relative objective change to stop at.
    init : {"random", "svd"}
        The initial U.
    random_state : int, numpy.random.RandomState or None
        Seed of the initialisation.
    n_power_iter : int
        Power iterations of ``init="svd"``.
    split_every : int
        Fan-in of the reduction tree.
    dtype : numpy.dtype
        float64 or float32: compute dtype of ``U^T X`` and of V (as given until
        :meth:`FitConfig.checked`, a ``numpy.dtype`` after).
    polar : {"auto", "svd", "gram"}
        Route of the U-step's polar factor.
    partials : {"auto", "rows", "dense"}
        Format of the ``X V^T`` block partials.
    accelerate : bool
        Extrapolated exact U-step (:func:`sphdist.core.solver.iterate`).
    device : {"cpu", "cuda"}
        Where the chunk kernels run (:func:`sphdist.core.kernels.pass_block`).
    """

    n_components: int  # no default: a fit says its r
    lam: float | str = PARAMS["lam"].default
    mu: float | str = PARAMS["mu"].default
    max_iter: int = PARAMS["max_iter"].default
    tol: float = PARAMS["tol"].default
    init: str = PARAMS["init"].default
    random_state: Any = PARAMS["random_state"].default
    n_power_iter: int = PARAMS["n_power_iter"].default
    split_every: int = PARAMS["split_every"].default
    dtype: Any = PARAMS["dtype"].default
    polar: str = PARAMS["polar"].default
    partials: str = PARAMS["partials"].default
    accelerate: bool = PARAMS["accelerate"].default
    device: str = PARAMS["device"].default


@dataclasses.dataclass(frozen=True, kw_only=True)
class FitConfig(SolverParameters):
    """The parameters of one Spherical PCA fit: one attribute per name of :data:`SOLVER_PARAMS`.

    Built once where a fit starts: by :meth:`build` (the table's defaults, validated), or
    constructed (its fields' defaults are the table's) and validated by :meth:`checked` (what
    :class:`sphdist.jobs.fit.FitRequest` does); passed down to the solver
    (:func:`sphdist.core.solver.fit` takes it as ``config``), its functions and the graph's
    pass. Each attribute's meaning, constraint and default are its row of :data:`PARAMS`;
    ``n_components`` has no default (the estimator's 2 is its own, the command line's is
    :data:`sphdist.jobs.params.N_COMPONENTS`).

    Examples
    --------
    >>> FitConfig.build(n_components=3).split_every
    8
    """

    @classmethod
    def build(cls, caller: str = "sphdist.core.solver.fit", **values: Any) -> FitConfig:
        """The configuration of ``values``, the table's defaults for the others, validated.

        Parameters
        ----------
        caller : str, default "sphdist.core.solver.fit"
            Named in the message of an invalid value.
        **values
            Names of :data:`SOLVER_PARAMS`.

        Returns
        -------
        FitConfig
            With ``dtype`` as a ``numpy.dtype``.

        Raises
        ------
        TypeError
            If a name is not a solver parameter.
        sphdist._validation.InvalidParameterValueError
            If a value is outside its row of :data:`PARAMS` (:func:`validate`); not checked
            inside :func:`sphdist._validation.validated`.
        """
        values = current_names(values, caller)
        unknown = set(values) - set(SOLVER_PARAMS)
        if unknown:
            raise TypeError(f"{caller}() got unexpected keyword arguments {sorted(unknown)}")
        return cls(**values).checked(caller)

    def checked(self, caller: str = "sphdist.core.solver.fit") -> FitConfig:
        """The configuration, validated against :data:`PARAMS`, ``dtype`` a ``numpy.dtype``.

        Pure: a frozen copy whose ``dtype`` is normalised (itself when it already is).

        Parameters
        ----------
        caller : str, default "sphdist.core.solver.fit"
            Named in the message of an invalid value.

        Returns
        -------
        FitConfig

        Raises
        ------
        sphdist._validation.InvalidParameterValueError
            If a value is outside its row of :data:`PARAMS` (:func:`validate`, in the table's
            order); not checked inside :func:`sphdist._validation.validated`.
        """
        if not _validated_by_caller():
            validate(self.values(), caller)
        if isinstance(self.dtype, np.dtype):
            return self
        return dataclasses.replace(self, dtype=np.dtype(self.dtype))

    def values(self) -> dict[str, Any]:
        """The parameters as a dict of :data:`SOLVER_PARAMS` (keywords of the solver)."""
        return {name: getattr(self, name) for name in SOLVER_PARAMS}


def _init_n_iter(self: FitConfig) -> int:
    """Old name of :attr:`~sphdist.core.params.SolverParameters.n_power_iter` (:data:`RENAMED`)."""
    warnings.warn("FitConfig.init_n_iter was renamed n_power_iter and is readable until the next "
                  "release.", FutureWarning, stacklevel=2)
    return self.n_power_iter


def _accept_old_names(init: Callable[..., None]) -> Callable[..., None]:
    """The dataclass's ``__init__``, taking the old names of :data:`RENAMED` too (warned)."""

    @functools.wraps(init)
    def __init__(self: FitConfig, **values: Any) -> None:
        init(self, **current_names(values, "FitConfig"))

    return __init__


# the old names, for one release: a keyword of the constructor (not a field, so that
# dataclasses.replace and the equality of two configs see the new name alone) and an attribute
FitConfig.__init__ = _accept_old_names(FitConfig.__init__)  # type: ignore[method-assign]
FitConfig.init_n_iter = property(_init_n_iter)  # type: ignore[attr-defined]


def _validated_by_caller() -> bool:
    """Whether the caller validated the parameters (inside :func:`sphdist._validation.validated`).

    That context is scikit-learn's configuration: when :mod:`sphdist._validation` was never
    imported (a ``sphdist fit``, which imports no scikit-learn) no caller can be inside it, and
    the table's check runs (microseconds; scikit-learn is imported only to word an error).
    """
    checks = sys.modules.get("sphdist._validation")
    return checks is not None and checks.skip_validation()
