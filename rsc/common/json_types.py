"""Pure: JSON-shaped data as a type, for what is read from or sent as JSON (admin answers,
the console's frames, health documents, audit entries).

`JsonValue` is what `json.loads` returns; `JsonObject` one object of it. Code that reads a
value narrows it with `isinstance` where the shape matters; code that only passes JSON on
takes `Mapping[str, object]`.
"""

from __future__ import annotations

from typing import TypeAlias

JsonValue: TypeAlias = "None | bool | int | float | str | list[JsonValue] | dict[str, JsonValue]"
JsonObject: TypeAlias = "dict[str, JsonValue]"
