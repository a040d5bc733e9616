"""What a forecaster reads, by name and role: declared once, read by the loader, the model and the audit.

A `Layout` is built from the config (targets, `data.past_covs`, `data.future_covs`, `data.static_covs`,
`data.calendar`, `model.cycle`) and what the data showed (the frequency's calendar features, the
categories of a categorical static covariate). The loader reads the columns it names, `prepare` scales
them by role, the model is built from its counts, `predict` builds a forecast's inputs from it, and the
leakage checks probe each role as the layout says it may be read:

- targets and past-only covariates: up to the forecast origin;
- known-future covariates (the data's, then the calendar's sin/cos pairs) and the learned cycle's phase:
  up to the end of the forecast horizon;
- static covariates: one value per series, constant in time, readable anywhere.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True)
class Layout:
    targets: tuple[str, ...]
    past: tuple[str, ...] = ()  # past-only covariates: observed with the target, unknown ahead
    future: tuple[str, ...] = ()  # known-future covariates from the data
    calendar: tuple[str, ...] = ()  # known-future calendar features from the timestamps (sin/cos pairs)
    cycle: int = 0  # the learned cycle's length; its phase (named `phase`) is a known-future input; 0 = none
    static_numeric: tuple[str, ...] = ()  # numeric static covariates, one value per series
    static_categorical: tuple[tuple[str, tuple[str, ...]], ...] = ()  # (name, its categories) per categorical one

    @property
    def phase(self) -> str:
        """The learned cycle's phase input, "cycle24_phase" for a cycle of 24 steps; "" without a cycle."""
        return f"cycle{self.cycle}_phase" if self.cycle else ""

    @property
    def n_targets(self) -> int:
        return len(self.targets)

    @property
    def n_past(self) -> int:
        return len(self.past)

    @property
    def known_future(self) -> tuple[str, ...]:
        """The known-future inputs besides the phase: the data's covariates, then the calendar features."""
        return self.future + self.calendar

    @property
    def n_future(self) -> int:
        return len(self.known_future)

    @property
    def scaled(self) -> tuple[str, ...]:
        """The columns the train-only scaler standardises, in its order: targets, past-only, known-future."""
        return self.targets + self.past + self.future

    @property
    def static(self) -> tuple[str, ...]:
        """Every static covariate: the numeric ones, then the categorical ones."""
        return self.static_numeric + tuple(name for name, _ in self.static_categorical)

    @property
    def cardinalities(self) -> tuple[int, ...]:
        """Per categorical static covariate, its number of categories (code 0 is kept for an unseen one)."""
        return tuple(len(categories) for _, categories in self.static_categorical)

    @property
    def reads_covariates(self) -> bool:
        return bool(self.past or self.known_future or self.phase or self.static)

    def to_dict(self) -> dict[str, Any]:
        return {
            "targets": list(self.targets),
            "past": list(self.past),
            "future": list(self.future),
            "calendar": list(self.calendar),
            "cycle": self.cycle,
            "static_numeric": list(self.static_numeric),
            "static_categorical": [[name, list(categories)] for name, categories in self.static_categorical],
        }

    @classmethod
    def from_dict(cls, raw: dict[str, Any]) -> Layout:
        """The inverse of `to_dict`; a value of the wrong type is a TypeError or ValueError."""
        names = {key: _names(raw[key], key) for key in ("targets", "past", "future", "calendar", "static_numeric")}
        categorical = tuple((str(name), _names(categories, name)) for name, categories in raw["static_categorical"])
        if isinstance(raw["cycle"], bool) or not isinstance(raw["cycle"], int) or raw["cycle"] < 0:
            raise TypeError("the learned cycle's length must be a count of steps")
        return cls(**names, cycle=raw["cycle"], static_categorical=categorical)

    def check(self) -> None:
        """Every name is distinct across roles; raises ValueError naming the first one given twice."""
        seen: set[str] = set()
        for name in (
            *self.targets,
            *self.past,
            *self.known_future,
            *((self.phase,) if self.phase else ()),
            *self.static,
        ):
            if not name or name in seen:
                raise ValueError(f"input {name!r} is empty or has two roles")
            seen.add(name)
        if not self.targets:
            raise ValueError("a layout needs at least one target")


def _names(values: Any, what: str) -> tuple[str, ...]:
    if not isinstance(values, list | tuple) or not all(isinstance(v, str) for v in values):
        raise TypeError(f"{what} must be a list of names")
    return tuple(values)
