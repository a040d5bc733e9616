"""Messages in the Python caller's terms.

The library writes its errors and notes for the command line (`name it with --time-col`, `train with --set
data.floor=zero`). The Python API (`tsformer.fit`, `tsformer.load`, the `Predictor` methods) rewrites each flag
as the keyword or config key it takes there (`time_col=`, `config={"data.floor": "zero"}`). A whole command
(`tsformer train --resume --out runs/x`) stays as it is: it is still what to run in a shell.
"""

from __future__ import annotations

import functools
import re
from collections.abc import Callable
from typing import ParamSpec, TypeVar

from tsformer.errors import TsformerError

KEYWORDS = {  # a flag -> the keyword argument of fit, predict, backtest or evaluate that does the same
    "--target": "target=",
    "--id-col": "id_col=",
    "--time-col": "time_col=",
    "--future-cov": "future_covs=",
    "--past-cov": "past_covs=",
    "--static-cov": "static_covs=",
    "--static": "static_df=",
    "--horizon": "horizon=",
    "--time-limit": "time_limit=",
    "--out": "out=",
    "--overwrite": "overwrite=True",
    "--resume": "resume=True",
    "--future": "future=",
    "--windows": "windows=",
    "--step": "step=",
    "--start": "start=",
    "--csv": "data=",
    "--split": "split=",
    "--refit": "refit=True",
}
CONFIG_KEYS = {  # a flag taking a value -> its config key
    "--context-len": "model.context_len",
    "--fill": "data.fill",
    "--freq": "data.freq",
    "--time-unit": "data.time_unit",
    "--candidates": "train.candidates",
    "--epochs": "train.epochs",
    "--seed": "train.seed",
    "--quantiles": "train.quantiles",
    "--interval": "train.intervals",
}
SWITCHES = {  # a flag without a value -> the config setting it makes
    "--sort": 'config={"data.sort": True}',
    "--dayfirst": 'config={"data.dayfirst": True}',
    "--no-fallback": 'config={"train.fallback": False}',
    "--no-calendar": 'config={"data.calendar": False}',
}
COMMAND = re.compile(r"tsformer (?:train|evaluate|predict|backtest|check|bench)\b[^;,)]*")
SET = re.compile(r"--set ([a-z_]+\.[a-z_]+)=(\.\.\.|\S*[^\s.,;)])")
FLAG = re.compile(r"--[a-z][a-z-]*(?![a-z-])")
VALUED = re.compile(r"(--[a-z][a-z-]*) ([A-Z][A-Z0-9_]*|-?\d[\d.]*)\b")  # a flag and a placeholder or number
REPEATED = re.compile(r"(--[a-z][a-z-]*) \w+(?: \1 \w+)+")  # a repeatable flag given again: --id-col a --id-col b
WORDS = {"--fill": ("ffill", "zero"), "--time-unit": ("s", "ms", "us", "ns")}  # a flag's values written as words
CHOICE = re.compile(rf"({'|'.join(WORDS)}) ([a-z]+)(?: or ([a-z]+))?\b")  # --fill ffill or zero
FREQ = re.compile(r"--freq ((?:\d*[A-Za-z]+)+(?:-[A-Z]{3})?)(?![\w-])")  # --freq h, B, QE-DEC, 1h30min: a word
FILE_PLACEHOLDER = "CSV"  # --future CSV: in Python a DataFrame or a path

Params = ParamSpec("Params")
Result = TypeVar("Result")


def python_terms(message: str) -> str:
    """`message` with each flag outside a whole command spelled as the Python API spells it (a flag of the
    command line alone, such as --refit, as it is)."""
    parts, last = [], 0
    for command in COMMAND.finditer(message):
        parts += [_respelled(message[last : command.start()]), command.group()]
        last = command.end()
    return "".join([*parts, _respelled(message[last:])])


def python_notes(notes) -> list[str]:
    """Notes (the empty ones left out) in Python terms, as the API's DataFrames carry them in `.attrs["notes"]`."""
    return [python_terms(note) for note in notes if note]


def _respelled(text: str) -> str:
    text = SET.sub(lambda m: f'config={{"{m.group(1)}": {_literal(m.group(2))}}}', text)
    text = REPEATED.sub(_repeated, text)
    text = FREQ.sub(_freq, text)
    text = VALUED.sub(_valued, text)
    text = CHOICE.sub(_choice, text)
    return FLAG.sub(lambda m: _keyword(m.group()), text)


def _freq(match: re.Match) -> str:
    """`--freq QE-DEC` as `config={"data.freq": "QE-DEC"}` when the word is a pandas frequency (else prose)."""
    from pandas.tseries.frequencies import to_offset

    try:
        to_offset(match.group(1))
    except ValueError:
        return match.group()
    return f'config={{"data.freq": "{match.group(1)}"}}'


def _repeated(match: re.Match) -> str:
    """`--id-col store --id-col item` as `id_col=["store", "item"]`."""
    flag = match.group(1)
    if not (flag in KEYWORDS and KEYWORDS[flag].endswith("=")):
        return match.group()
    values = re.findall(rf"{flag} (\w+)", match.group())
    quoted = ", ".join(f'"{value}"' for value in values)
    return f"{KEYWORDS[flag]}[{quoted}]"


def _choice(match: re.Match) -> str:
    """A config flag's value words: `--fill ffill or zero` as `config={"data.fill": "ffill"} or config={"data.fill":
    "zero"}`."""
    flag, first, second = match.groups()
    if first not in WORDS[flag] or (second is not None and second not in WORDS[flag]):
        return match.group()
    key = CONFIG_KEYS[flag]
    respelled = f'config={{"{key}": "{first}"}}'
    return respelled if second is None else f'{respelled} or config={{"{key}": "{second}"}}'


def _valued(match: re.Match) -> str:
    """`--windows 4` as `windows=4`, `--context-len N` as `config={"model.context_len": N}`."""
    flag, value = match.groups()
    if flag in KEYWORDS and KEYWORDS[flag].endswith("="):
        return f"{KEYWORDS[flag]}{'(a DataFrame or a CSV path)' if value == FILE_PLACEHOLDER else value}"
    if flag in CONFIG_KEYS:
        return f'config={{"{CONFIG_KEYS[flag]}": {value}}}'
    return match.group()


def _literal(value: str) -> str:
    """A --set value as Python: a number or a placeholder (N, ...) as written, true and false as booleans, a word
    quoted."""
    if value in ("N", "...") or re.fullmatch(r"[-+0-9.e]+", value):
        return value
    if value.lower() in ("true", "false"):
        return value.capitalize()
    return f'"{value}"'


def _keyword(flag: str) -> str:
    if flag in KEYWORDS:
        return KEYWORDS[flag]
    if flag in CONFIG_KEYS:
        return f"config key {CONFIG_KEYS[flag]}"
    return SWITCHES.get(flag, flag)


def in_python_terms(function: Callable[Params, Result]) -> Callable[Params, Result]:
    """`function` raising its errors (`TsformerError`) with their messages in Python terms (`python_terms`)."""

    @functools.wraps(function)
    def respelled(*args: Params.args, **kwargs: Params.kwargs) -> Result:
        try:
            return function(*args, **kwargs)
        except TsformerError as exc:
            exc.args = (python_terms(str(exc)), *exc.args[1:])  # the same error and traceback, respelled
            raise

    return respelled
