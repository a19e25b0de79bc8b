"""The YAML Jetway prints for Kubernetes objects: `jetway render` (offline from -f, and recorded for md/NAME) and
the console's deployment page, which shows the text `jetway render md/NAME` prints, byte for byte.

One dumper, so the same objects are the same bytes wherever they are printed. PyYAML's `safe_dump` writes an
anchor (`&id001`) and an alias (`*id001`) when one Python object appears twice in what it dumps: a renderer that
puts one labels dict in a Job's metadata and in its pod template would print an anchor offline, while the same
objects read back from the event stream (JSON: two equal dicts) print in full. This dumper never writes an alias:
equal objects print the same, however they were built.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from typing import Any

import yaml


class _Dumper(yaml.SafeDumper):
    """`yaml.safe_dump`'s dumper, writing every value in full (no anchors, no aliases)."""

    def ignore_aliases(self, data: Any) -> bool:
        return True


def dump(obj: Any) -> str:
    """One object as block YAML, its keys in their own order (as `yaml.safe_dump(obj, sort_keys=False)`, minus aliases)."""
    return yaml.dump(obj, Dumper=_Dumper, sort_keys=False)


def documents(objects: Iterable[Any]) -> str:
    """A YAML stream: each object as a document after its `---` line."""
    return "".join(f"---\n{dump(obj)}" for obj in objects)


def recorded(kind: str, name: str, objects: Mapping[str, Sequence[Any]]) -> str:
    """What `jetway render KIND/NAME` prints: for each service that recorded objects (in the order given: the API's,
    by service name), a comment naming it, then its objects; a comment alone when none did."""
    if not objects:
        return f"# nothing recorded for {kind}/{name} yet\n"
    return "".join(f"# recorded by the {owner} service\n{documents(items)}" for owner, items in objects.items())
