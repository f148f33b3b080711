"""A table as the tester knows it: its user columns and key, and the Fivetran system columns its mode adds."""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from destination.model.table_model import ACTIVE, DELETED, END, FIVETRAN_ID, START, SYNCED
from destination.protocol import common


@dataclass
class TesterTable:
    name: str
    columns: list[tuple[str, str, dict[str, Any]]]  # (name, TYPE, params) of user columns
    primary_key: list[str]
    history: bool = False
    soft_deleted: bool = False

    def proto(self) -> common.Table:
        table = common.Table(name=self.name)
        for name, ftype, params in self.columns:
            col = table.columns.add(name=name, type=common.DataType.Value(ftype), primary_key=name in self.primary_key)
            if ftype == "DECIMAL" and params:
                col.params.decimal.precision = int(params.get("precision", 38))
                col.params.decimal.scale = int(params.get("scale", 10))
        table.columns.add(name=SYNCED, type=common.DataType.Value("UTC_DATETIME"))
        if self.history:
            table.columns.add(name=START, type=common.DataType.Value("UTC_DATETIME"), primary_key=True)
            table.columns.add(name=END, type=common.DataType.Value("UTC_DATETIME"))
            table.columns.add(name=ACTIVE, type=common.DataType.Value("BOOLEAN"))
            if self.soft_deleted:
                table.columns.add(name=DELETED, type=common.DataType.Value("BOOLEAN"))
        else:
            if not self.primary_key:
                table.columns.add(name=FIVETRAN_ID, type=common.DataType.Value("STRING"), primary_key=True)
            table.columns.add(name=DELETED, type=common.DataType.Value("BOOLEAN"))
        return table

    @property
    def key_names(self) -> list[str]:
        return list(self.primary_key) if self.primary_key else [FIVETRAN_ID]

    @property
    def all_columns(self) -> list[str]:
        return [c.name for c in self.proto().columns]

    @property
    def binary_columns(self) -> set[str]:
        return {name for name, ftype, _ in self.columns if ftype == "BINARY"}
