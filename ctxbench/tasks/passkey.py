"""Passkey retrieval (DESIGN.md "Tasks: protocols") — being written; interface fixed here."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass

from ..methods import MethodSetting
from ..models import LoadedModel
from .base import Cell, Measurement

NAME = "passkey"


@dataclass
class Settings:
    methods: list[MethodSetting]
    factors: list[float]
    lengths: list[int]
    depths: list[float]
    trials: int = 2
    digits: int = 5
    seed: int = 0
    chat: bool = False
    max_new_tokens: int = 10


@dataclass
class Context:
    dataset: str
    data_digest: str
    notes: list[str]


def prepare(lm: LoadedModel, settings: Settings) -> Context:
    raise NotImplementedError


def cells(settings: Settings, ctx: Context) -> list[Cell]:
    raise NotImplementedError


def groups(todo: list[Cell], settings: Settings) -> list[list[Cell]]:
    return [[c] for c in todo]


def run_group(lm: LoadedModel, ctx: Context, group: list[Cell], settings: Settings) -> Iterator[tuple[Cell, list[Measurement]]]:
    raise NotImplementedError
