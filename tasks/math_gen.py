"""Offline DeepMind Mathematics questions from the ``mathematics-dataset`` package.

The package (1.0.1, 2019) predates numpy 2, sympy >= 1.7 and Python 3.12.
Small shims, local to the package's own modules (numpy, sympy and ``random``
stay unchanged for the rest of the process), make every one of its 56
question types run:

* ``sympy.solvers.diophantine.base_solution_linear`` moved into the
  ``...diophantine.diophantine`` submodule; it is exposed on the package only
  while the generator's module is imported.
* numpy 2 dropped ``np.object`` and ``ndarray.itemset``: the polynomial
  sampler gets a numpy proxy with the alias whose ``zeros``/``empty`` return an
  ndarray subclass that still has ``itemset``.
* ``random.randint`` with integral floats (deprecated in 3.10, an error from
  3.12): the number modules get a ``random`` proxy that passes ints.

Determinism: Python's ``random``, numpy's legacy global RNG and sympy's private
RNG are seeded for the duration of a call and restored afterwards; the
package's pool of variable letters (a ``set``, whose order follows the
per-process string hash salt) is replaced by one that iterates in sorted order.
So the same seed gives the same questions in every process."""

from __future__ import annotations

import importlib
import random
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

from promptrobust.extras import MissingExtraError, install_command, missing_modules
from promptrobust.tasks.errors import TaskDataError

#: The 20 question types of the PromptRobust math set (promptbench's list, with
#: its misspelt module names corrected); 8 questions each gives the paper's 160.
PAPER_MODULES: tuple[str, ...] = (
    "algebra__linear_1d",
    "algebra__linear_2d",
    "algebra__sequence_next_term",
    "arithmetic__add_sub_multiple",
    "arithmetic__mul_div_multiple",
    "arithmetic__mixed",
    "arithmetic__nearest_integer_root",
    "comparison__closest",
    "comparison__kth_biggest",
    "comparison__pair",
    "measurement__conversion",
    "numbers__base_conversion",
    "numbers__div_remainder",
    "numbers__gcd",
    "numbers__is_factor",
    "numbers__is_prime",
    "numbers__lcm",
    "numbers__place_value",
    "numbers__round_number",
    "polynomials__evaluate",
)

# The package's own limits on question / answer length (generate_settings).
_MAX_QUESTION = 160
_MAX_ANSWER = 30
_MAX_TRIES = 1000


@dataclass(frozen=True)
class MathProblem:
    module: str
    question: str
    answer: str


def _itemset_array_type(numpy: Any) -> type:
    class ItemsetArray(numpy.ndarray):
        """ndarray with numpy 1's ``itemset(index, value)``."""

        def itemset(self, index: Any, value: Any) -> None:
            if isinstance(index, int):
                self.flat[index] = value
            else:
                self[tuple(index)] = value

    return ItemsetArray


class _NumpyCompat:
    """numpy as the 2019 code expects it: ``np.object`` and ``ndarray.itemset``."""

    object = object

    def __init__(self, numpy_module: Any) -> None:
        self._np = numpy_module
        self._array_type = _itemset_array_type(numpy_module)

    def zeros(self, *args: Any, **kwargs: Any) -> Any:
        return self._np.zeros(*args, **kwargs).view(self._array_type)

    def empty(self, *args: Any, **kwargs: Any) -> Any:
        return self._np.empty(*args, **kwargs).view(self._array_type)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._np, name)


class _RandomCompat:
    """The ``random`` module, but ``randint`` accepts integral floats."""

    def randint(self, a: Any, b: Any) -> int:
        return random.randint(_as_int(a), _as_int(b))

    def __getattr__(self, name: str) -> Any:
        return getattr(random, name)


def _as_int(x: Any) -> Any:
    if isinstance(x, float) and x.is_integer():
        return int(x)
    return x


class _SortedIterSet(set):
    """A set that iterates in sorted order, also after ``difference``."""

    def __iter__(self) -> Iterator[Any]:
        return iter(sorted(set.__iter__(self)))

    def difference(self, *others: Any) -> "_SortedIterSet":
        return _SortedIterSet(set.difference(self, *others))


_MODULES: dict[str, dict[str, Any]] | None = None


def _import_package() -> Any:
    """Import ``mathematics_dataset.modules.modules`` with the shims applied."""
    try:
        import numpy

        # Not ``import sympy.solvers.diophantine as ...``: that name resolves to
        # the diophantine() function, which shadows the package.
        dio_pkg = importlib.import_module("sympy.solvers.diophantine")
    except ImportError as exc:  # pragma: no cover - both ship with torch/transformers here
        raise TaskDataError(f"math generation needs numpy and sympy ({exc}); pip install numpy sympy") from exc
    dio_mod = importlib.import_module("sympy.solvers.diophantine.diophantine")
    added = False
    if not hasattr(dio_pkg, "base_solution_linear"):
        setattr(dio_pkg, "base_solution_linear", dio_mod.base_solution_linear)
        added = True
    try:
        try:
            poly_sample = importlib.import_module("mathematics_dataset.sample.polynomials")
            composition = importlib.import_module("mathematics_dataset.util.composition")
            modules = importlib.import_module("mathematics_dataset.modules.modules")
        except ImportError as exc:
            missing = missing_modules(["mathematics_dataset"])
            raise TaskDataError(
                str(MissingExtraError("generating the math task", "data", missing)) if missing
                else f"cannot import mathematics_dataset ({exc}); reinstall it: {install_command('data')}"
            ) from exc
    finally:
        if added:
            del dio_pkg.base_solution_linear
    # Always proxied: probing ``numpy.object`` itself warns on numpy 2.
    setattr(poly_sample, "np", _NumpyCompat(numpy))
    setattr(composition, "_ALLOWED_SYMBOLS", _SortedIterSet(getattr(composition, "_ALLOWED_SYMBOLS")))
    for name in ("numbers", "arithmetic", "comparison", "measurement", "polynomials", "algebra", "calculus"):
        mod = importlib.import_module(f"mathematics_dataset.modules.{name}")
        if getattr(mod, "random", None) is random:
            setattr(mod, "random", _RandomCompat())
    return modules


def _flatten(tree: dict[str, Any], prefix: str = "") -> Iterator[tuple[str, Callable[[], Any]]]:
    for key, value in tree.items():
        name = f"{prefix}__{key}" if prefix else key
        if isinstance(value, dict):
            yield from _flatten(value, name)
        else:
            yield name, value


def _module_table() -> dict[str, dict[str, Any]]:
    """``{"test": {name: fn}, "train": {name: fn}}`` built once per process."""
    global _MODULES
    if _MODULES is None:
        modules = _import_package()
        whole = lambda r: r  # noqa: E731 - train at the full entropy range
        _MODULES = {
            "test": dict(_flatten(modules.test())),
            "train": dict(_flatten(modules.train(whole))),
        }
    return _MODULES


def available_modules(split: str = "test") -> list[str]:
    """Names of every question type the installed package can generate."""
    return sorted(_module_table()[split])


@contextmanager
def _seeded(seed: int) -> Iterator[None]:
    import numpy
    from sympy.core import random as sympy_random

    py_state = random.getstate()
    np_state = numpy.random.get_state()
    sp_state = sympy_random.rng.getstate()
    random.seed(seed)
    numpy.random.seed(seed % (2**32))
    sympy_random.rng.seed(seed)
    try:
        yield
    finally:
        random.setstate(py_state)
        numpy.random.set_state(np_state)
        sympy_random.rng.setstate(sp_state)


def _draw(fn: Callable[[], Any], module: str) -> MathProblem:
    for _ in range(_MAX_TRIES):
        problem = fn()
        question, answer = str(problem.question), str(problem.answer)
        if len(question) <= _MAX_QUESTION and len(answer) <= _MAX_ANSWER:
            return MathProblem(module, question, answer)
    raise TaskDataError(f"math module {module} produced no question short enough in {_MAX_TRIES} tries")


def generate(
    modules: tuple[str, ...] | list[str] = PAPER_MODULES,
    per_module: int = 8,
    *,
    seed: int = 0,
    split: str = "test",
) -> list[MathProblem]:
    """``per_module`` questions from each module, deterministic for a given seed.

    ``split="test"`` uses the package's interpolation difficulty (its test set);
    ``"train"`` its training difficulty (used for the few-shot pool).
    """
    table = _module_table()
    if split not in table:
        raise ValueError(f"unknown math split {split!r}; use 'test' or 'train'")
    unknown = [m for m in modules if m not in table[split]]
    if unknown:
        raise TaskDataError(
            f"unknown math module(s) {', '.join(unknown)}; see tasks.math_gen.available_modules()"
        )
    out: list[MathProblem] = []
    for module in modules:
        # One seed per module, so adding a module never changes another's questions.
        with _seeded(seed * 1_000_003 + _stable_hash(module)):
            fn = table[split][module]
            out.extend(_draw(fn, module) for _ in range(per_module))
    return out


def _stable_hash(text: str) -> int:
    """A process-independent hash (``hash(str)`` is salted per process)."""
    value = 0
    for ch in text.encode():
        value = (value * 131 + ch) % 1_000_000_007
    return value

