"""``@step``: a Python function whose execution Reprise caches, records and replays.

Calling a step inside a ``@pipeline`` function does not run it: it adds a node to
the pipeline's graph and returns placeholders for its outputs, which later steps
take as inputs. Outputs are declared by the return annotation:

* ``-> X`` (or none): one output named ``output``;
* ``-> tuple[A, B]``: outputs ``0`` and ``1`` (unpack them at the call site);
* ``-> MyNamedTuple`` or a dataclass: one output per field, by field name.
"""

from __future__ import annotations

import dataclasses
import functools
import inspect
import sys
import threading
import typing
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any, TypeVar, overload

from reprise.core.errors import UserError

__all__ = ["PipelineDefinitionError", "Step", "StepOutput", "Outputs", "lookup_step", "step"]

F = TypeVar("F", bound=Callable[..., Any])


class PipelineDefinitionError(UserError):
    """A pipeline or step is defined or wired wrongly (found before anything runs)."""


# Ray's own names for these: a custom resource may not take them (it would shadow them)
_RESERVED = {"cpu", "cpus", "num_cpus", "gpu", "gpus", "num_gpus", "memory", "mem",
             "object_store_memory", "accelerator_type"}


@dataclass(frozen=True)
class Resources:
    """What one execution needs: CPUs, GPUs, memory (bytes) and custom resources.

    Executors that place work (Ray) schedule the step only where these are free;
    custom resources (any other name, e.g. ``{"reprise_node2": 1}``) are the
    cluster's own labels (``ray start --resources``). The local executor runs every
    step on this machine. Resources are not part of the cache key: where a step runs
    does not change what it computes.
    """

    cpus: float = 1.0
    gpus: float = 0.0
    memory: int | None = None
    custom: tuple[tuple[str, float], ...] = ()

    @classmethod
    def of(cls, value: Resources | Mapping[str, Any] | None) -> Resources:
        if value is None:
            return cls()
        if isinstance(value, Resources):
            return value
        if not isinstance(value, Mapping):
            raise PipelineDefinitionError(
                f"resources must be a dict such as {{'cpus': 2, 'gpus': 1}}, got {value!r}.")
        known = {"cpus", "gpus", "memory", "cpu", "gpu"}
        custom = []
        for name in sorted(set(value) - known, key=str):
            if not isinstance(name, str) or not name or name.lower() in _RESERVED:
                raise PipelineDefinitionError(
                    f"resource name {name!r} is not allowed; use cpus=, gpus= and memory= "
                    "(bytes), and any other name for a custom resource of the cluster.")
            custom.append((name, _amount(name, value[name])))
        memory = value.get("memory")
        if memory is not None and (isinstance(memory, bool) or not isinstance(memory, int)
                                   or memory <= 0):
            raise PipelineDefinitionError(
                f"resources: memory must be a positive number of bytes, got {memory!r}.")
        return cls(cpus=_amount("cpus", value.get("cpus", value.get("cpu", 1.0))),
                   gpus=_amount("gpus", value.get("gpus", value.get("gpu", 0.0))),
                   memory=memory, custom=tuple(custom))


def _amount(name: str, value: Any) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not value >= 0 \
            or value == float("inf"):
        raise PipelineDefinitionError(
            f"resources: {name} must be a finite number >= 0, got {value!r}.")
    return float(value)


@dataclass(frozen=True)
class StepOutput:
    """Placeholder for one output of one node, used to wire steps together."""

    node: str
    name: str
    annotation: Any = field(default=None, compare=False, repr=False)

    def __iter__(self) -> Any:
        raise PipelineDefinitionError(
            f"the output of step {self.node!r} is a single value and cannot be unpacked; "
            "annotate the step's return as tuple[...] (or a NamedTuple) to declare several."
        )

    def __bool__(self) -> bool:
        raise PipelineDefinitionError(
            f"the output of step {self.node!r} has no value while the pipeline is being "
            "built; branch inside a step, not on a step's output in the pipeline body."
        )


class Outputs(tuple):  # type: ignore[type-arg]
    """Several outputs of one node: unpack it or read outputs by name."""

    _names: tuple[str, ...]

    def __new__(cls, items: list[StepOutput]) -> Outputs:
        obj = super().__new__(cls, items)
        obj._names = tuple(o.name for o in items)
        return obj

    def __getattr__(self, name: str) -> StepOutput:
        try:
            return self[self._names.index(name)]  # type: ignore[no-any-return]
        except ValueError:
            raise AttributeError(f"no output named {name!r}; outputs are {self._names}") from None


_REGISTRY: dict[tuple[str, str], Step] = {}
_local = threading.local()


def current_builder() -> Any:
    return getattr(_local, "builder", None)


def set_builder(builder: Any) -> Any:
    previous = getattr(_local, "builder", None)
    _local.builder = builder
    return previous


class Step:
    """A decorated step function. ``step.func`` is the plain function."""

    def __init__(self, func: Callable[..., Any], *, name: str | None = None, cache: bool = True,
                 retries: int = 0, resources: Resources | Mapping[str, Any] | None = None) -> None:
        if not callable(func) or not hasattr(func, "__code__"):
            raise PipelineDefinitionError(f"@step decorates functions, not {func!r}.")
        if inspect.iscoroutinefunction(func) or inspect.isgeneratorfunction(func):
            raise PipelineDefinitionError(
                f"step {func.__name__!r} at {_where(func)}: steps must be plain functions that "
                "return their outputs (not async functions or generators)."
            )
        if not isinstance(retries, int) or retries < 0:
            raise PipelineDefinitionError(f"step {func.__name__!r}: retries must be an int >= 0.")
        self.func = func
        self.__reprise_func__ = func
        self.name = name or func.__name__
        self.cache = bool(cache)
        self.retries = retries
        self.resources = Resources.of(resources)
        self.signature = inspect.signature(func)
        self.module = func.__module__
        self.qualname = func.__qualname__
        functools.update_wrapper(self, func)
        _REGISTRY[(self.module, self.qualname)] = self

    @functools.cached_property
    def output_spec(self) -> tuple[str, list[tuple[str, Any]]]:
        """``(shape, [(name, annotation), ...])``; shape is single/tuple/namedtuple/dataclass."""
        return _output_spec(self.func)

    @property
    def where(self) -> str:
        return _where(self.func)

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        builder = current_builder()
        if builder is None:
            caller = sys._getframe(1)
            raise PipelineDefinitionError(
                f"step {self.name!r} was called outside a pipeline "
                f"({caller.f_code.co_filename}:{caller.f_lineno}); call it inside a @pipeline "
                f"function, or call {self.func.__name__}.func(...) to run the plain function."
            )
        return builder.add(self, args, kwargs, sys._getframe(1))

    def with_options(self, **options: Any) -> Step:
        """A copy with other options (``name``, ``cache``, ``retries``, ``resources``)."""
        merged = {"name": self.name, "cache": self.cache, "retries": self.retries,
                  "resources": self.resources, **options}
        clone = Step.__new__(Step)
        clone.__dict__.update(self.__dict__)
        clone.__dict__.pop("output_spec", None)
        clone.name, clone.cache = merged["name"], bool(merged["cache"])
        clone.retries, clone.resources = merged["retries"], Resources.of(merged["resources"])
        return clone

    def __repr__(self) -> str:
        return f"<step {self.name} ({self.module}.{self.qualname})>"


@overload
def step(func: F, /) -> Step: ...
@overload
def step(*, name: str | None = None, cache: bool = True, retries: int = 0,
         resources: Resources | Mapping[str, Any] | None = None) -> Callable[[F], Step]: ...


def step(func: Any = None, /, *, name: str | None = None, cache: bool = True, retries: int = 0,
         resources: Resources | Mapping[str, Any] | None = None) -> Any:
    """Declare a pipeline step. Use bare (``@step``) or with options (``@step(cache=False)``).

    Example:
        >>> from reprise import step
        >>> @step
        ... def double(x: int) -> int:
        ...     return 2 * x
        >>> double.func(21)
        42
    """
    if func is not None:
        return Step(func, name=name, cache=cache, retries=retries, resources=resources)
    return lambda f: Step(f, name=name, cache=cache, retries=retries, resources=resources)


def lookup_step(module: str, qualname: str) -> Step:
    """The step registered under ``module``/``qualname`` (importing the module if needed)."""
    import importlib

    for mod in (module, "__mp_main__" if module == "__main__" else module):
        found = _REGISTRY.get((mod, qualname))
        if found is not None:
            return found
    if module not in sys.modules and module != "__main__":
        importlib.import_module(module)
    found = _REGISTRY.get((module, qualname))
    if found is None:
        raise LookupError(f"step {module}.{qualname} is not defined in this process")
    return found


def _where(func: Callable[..., Any]) -> str:
    code = getattr(func, "__code__", None)
    if code is None:
        return "<unknown>"
    return f"{code.co_filename}:{code.co_firstlineno}"


def _output_spec(func: Callable[..., Any]) -> tuple[str, list[tuple[str, Any]]]:
    try:
        hints = typing.get_type_hints(func)
    except Exception:  # unresolvable forward references: treat the output as untyped
        hints = {}
    ret = hints.get("return", inspect.Signature.empty)
    origin = typing.get_origin(ret)
    if origin is tuple:
        args = typing.get_args(ret)
        if not args or (len(args) == 2 and args[1] is Ellipsis):
            return "single", [("output", ret)]
        return "tuple", [(str(i), a) for i, a in enumerate(args)]
    if isinstance(ret, type) and issubclass(ret, tuple) and hasattr(ret, "_fields"):
        fhints = typing.get_type_hints(ret)
        return "namedtuple", [(f, fhints.get(f, Any)) for f in ret._fields]
    if isinstance(ret, type) and dataclasses.is_dataclass(ret) and not _stored_whole(ret):
        fhints = typing.get_type_hints(ret)
        return "dataclass", [(f.name, fhints.get(f.name, Any)) for f in dataclasses.fields(ret)]
    return "single", [("output", None if ret is inspect.Signature.empty else ret)]


def _stored_whole(tp: type) -> bool:
    """A dataclass that a registered materializer stores is one output, not one per field."""
    from reprise.store._materializers import materializer_for_type

    m = materializer_for_type(tp)
    return m is not None and m.name not in ("json",)


def split_outputs(step_: Step, value: Any) -> list[tuple[str, Any]]:
    """The step's return value as ``[(output name, object), ...]`` per its declaration."""
    shape, spec = step_.output_spec
    if shape == "single":
        return [("output", value)]
    names = [n for n, _ in spec]
    if shape == "dataclass":
        if not dataclasses.is_dataclass(value) or isinstance(value, type):
            raise TypeError(f"step {step_.name!r} declared a dataclass return but returned "
                            f"{type(value).__name__}")
        return [(n, getattr(value, n)) for n in names]
    if not isinstance(value, tuple) or len(value) != len(names):
        raise TypeError(f"step {step_.name!r} declared {len(names)} outputs but returned "
                        f"{type(value).__name__}"
                        + (f" of length {len(value)}" if isinstance(value, tuple) else ""))
    return list(zip(names, value, strict=True))


def join_outputs(step_: Step, values: dict[str, Any]) -> Any:
    """Inverse of :func:`split_outputs` for results loaded back from the store."""
    shape, spec = step_.output_spec
    if shape == "single":
        return values["output"]
    ordered = [values[n] for n, _ in spec]
    ret = typing.get_type_hints(step_.func).get("return")
    if shape in ("namedtuple", "dataclass") and isinstance(ret, type):
        return ret(*ordered)
    return tuple(ordered)
