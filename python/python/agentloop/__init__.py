"""agentloop's recorded traces from Python.

A trace (``agentloop run --trace T.jsonl``) records one run: its header, every input event,
every transition and every effect. This package reads traces with the same Rust code as the
``agentloop`` command (the pure ``agentloop-core`` and ``agentloop-trace-tools`` crates)::

    import agentloop

    t = agentloop.Trace.load("T.jsonl")
    assert t.replay() is None          # replays identically
    t.what_if(max_steps=1)["changes"]  # ['outcome completed (final_answer) → ...', ...]
    t.steps()                          # a pandas DataFrame, one row per model step
    t.to_otlp(include_content=True)    # its OpenTelemetry GenAI spans (OTLP JSON, a dict)

    agentloop.replay_dir("traces/")    # a corpus: counts and one entry per trace
    agentloop.steps("traces/")         # every trace's steps in one DataFrame

The tables have the columns of ``agentloop trace export --table runs|steps|tool_calls|events``.
pandas is imported only by the DataFrame functions; ``Trace.columns(name)`` and
``agentloop.columns(paths, name)`` give the same tables as dicts of lists without it.
"""

import os as _os

from ._agentloop import (
    SETTINGS,
    TABLES,
    TRACE_VERSION,
    InternalError,
    SettingError,
    Trace,
    TraceCorruptError,
    TraceError,
    TraceReadError,
    TraceTooLargeError,
    TraceVersionError,
    UnknownDeciderError,
)
from . import _agentloop as _native

__all__ = [
    "Trace",
    "TraceError",
    "TraceReadError",
    "TraceTooLargeError",
    "TraceCorruptError",
    "TraceVersionError",
    "UnknownDeciderError",
    "SettingError",
    "InternalError",
    "TRACE_VERSION",
    "SETTINGS",
    "TABLES",
    "load_dir",
    "replay_dir",
    "what_if_dir",
    "columns",
    "import_inspect",
    "import_otel",
    "runs",
    "steps",
    "tool_calls",
    "events",
]


def _paths(paths):
    """A path, or a list of paths, as a list of path strings."""
    if isinstance(paths, (str, bytes, _os.PathLike)):
        paths = [paths]
    return [_os.fsdecode(p) for p in paths]


def load_dir(paths, *, skip_unreadable=False):
    """Every trace of ``paths`` (a directory walked for ``*.jsonl``, a file, or a list of
    them), read in parallel, in path order. A trace that cannot be read raises its typed
    exception, or is left out with ``skip_unreadable=True``."""
    return _native._load(_paths(paths), skip_unreadable)


def replay_dir(paths):
    """Replays every trace of ``paths`` in parallel (``agentloop replay DIR --json``): a dict
    with ``traces``, ``identical``, ``diverged``, ``unreadable`` and ``files`` (per trace:
    ``path``, ``status`` — identical, diverged or unreadable — and ``records``, the
    divergence's ``index`` and ``input``, or the ``error``)."""
    return _native._replay_corpus(_paths(paths))


def what_if_dir(paths, settings=None, **kwargs):
    """What-if replays every trace of ``paths`` with changed settings (``what_if_dir("d",
    max_steps=2)``, as ``Trace.what_if``): a dict with ``changed``, ``unchanged``,
    ``unreadable``, ``totals`` (per figure: before and after) and ``files``."""
    return _native._what_if_corpus(_paths(paths), settings, **kwargs)


def columns(paths, table, *, skip_unreadable=False):
    """The table ``table`` (runs, steps, tool_calls, events) of every trace of ``paths``,
    concatenated in path order, as a dict of columns (no pandas needed)."""
    return _native._columns(_paths(paths), table, skip_unreadable)


def import_inspect(path):
    """Every sample of an Inspect AI eval log (its default ``.eval`` zip or its JSON, with
    samples) as a Trace, in the log's order (``agentloop trace import --from inspect-eval``):
    each named ``PATH#ID_epochN``, with each step's token usage and the tools' schemas as the
    log recorded them, and what the import could not carry over in ``.findings``. Raises
    TraceReadError (unreadable file) or TraceCorruptError (not an eval log with samples, a
    damaged zip, or one inflating past 256 MiB)."""
    return _native._import_inspect(_os.fsdecode(path))


def import_otel(path):
    """Every trace id of an OpenTelemetry GenAI export (OTLP JSON) as a Trace, in the order the
    ids first appear (``agentloop trace import --from otel-genai``): each named
    ``PATH#TRACE_ID``, with each step's token usage (``gen_ai.usage.*`` or OpenInference's
    ``llm.token_count.*``), the tools' schemas, the temperature and max tokens the spans asked
    for, and what the import could not carry over in ``.findings``. Raises
    TraceReadError (unreadable file) or TraceCorruptError (not an export with chat spans)."""
    return _native._import_otel(_os.fsdecode(path))


def runs(paths, *, skip_unreadable=False):
    """One row per run of every trace of ``paths`` (a pandas DataFrame)."""
    return _native._data_frame(columns(paths, "runs", skip_unreadable=skip_unreadable))


def steps(paths, *, skip_unreadable=False):
    """One row per model step of every trace of ``paths`` (a pandas DataFrame)."""
    return _native._data_frame(columns(paths, "steps", skip_unreadable=skip_unreadable))


def tool_calls(paths, *, skip_unreadable=False):
    """One row per tool call of every trace of ``paths`` (a pandas DataFrame)."""
    return _native._data_frame(columns(paths, "tool_calls", skip_unreadable=skip_unreadable))


def events(paths, *, skip_unreadable=False):
    """One row per record of every trace of ``paths`` (a pandas DataFrame)."""
    return _native._data_frame(columns(paths, "events", skip_unreadable=skip_unreadable))
